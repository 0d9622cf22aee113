"""Adversarial tests for today's changes: cross-delta redaction in recordings
(rafrx/_redaction.py, recorder.record) and fragment compaction (rafrx/_fragments.py
in the streaming parser, flush_tool_calls, convert and aggregate).

Passing tests pin behaviour that holds; each failing test states one bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import threading
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import reactivex
from reactivex import operators as rx
from reactivex.subject import Subject

import rafrx._redaction as redaction_module
import rafrx.json_stream as json_stream_module
import rafrx.operators._aggregate as aggregate_module
import rafrx.operators._convert as convert_module
import rafrx.operators._flush_tool_calls as flush_module
from rafrx import content as c
from rafrx import operators as ops
from rafrx import updates as u
from rafrx._fragments import COMPACT_AT
from rafrx._redaction import DeltaRedactor, _pieces, redact_cut_short, redact_with
from rafrx.errors import StreamInterrupted
from rafrx.json_stream import ArgMember, ArgProgress, StreamingArgsParser
from rafrx.recorder import load, record, record_sse, replay
from rafrx.response import AgentResponseResult, FinishReason
from tests.operators import apart
from tests.operators import run as run_ops
from tests.test_redaction import ends_in_a_secret

R = AgentResponseResult
KEY = "sk-proj-0123456789abcdefXYZ"
SECRET = "hunter2-hunter2"


# ====================================================================== redaction


def recorded(items: list[Any], path: Path, secrets: list[str] = []) -> list[Any]:  # noqa: B006
    passed = record(reactivex.from_iterable(items), path, secrets=secrets).pipe(rx.to_list())
    assert passed.run() == items  # subscribers see the originals
    return load(path).items


def joined_by_channel(items: list[Any]) -> dict[Any, str]:
    out: dict[Any, str] = {}
    for item in items:
        for channel, text in _pieces(item):
            out[channel] = out.get(channel, "") + text
    return out


_WORDS = [
    *(SECRET, "hunter2", "hun", KEY, "sk-", "?key=v4lue&", "&token=", "?"),
    *("Bearer abcdefgh123", "bearer ", "b", "AIzaSyA0123456789012345678901234567", "AIza"),
    *("abab", "aba", "x.y*z", "x.y", "é\nü", "é", " ", "-", "a", "s", "k", "\n", "pw", "p"),
]
_SECRET_CHOICES = [SECRET, "abab", "x.y*z", "é\nü", "pw"]


def _mixed_stream(rng: random.Random) -> tuple[list[Any], list[str]]:
    """Texts of several channels, cut anywhere and interleaved, several per chunk."""
    secrets = rng.sample(_SECRET_CHOICES, rng.randint(0, 3))
    names = ["text", "reasoning", "args1", "args2", "value_v", "value_w", "legacy"]
    texts = {n: "".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 10))) for n in names}
    position = dict.fromkeys(names, 0)

    def take(name: str) -> str:
        start = position[name]
        end = start + rng.randint(0, len(texts[name]) - start)
        position[name] = end
        return texts[name][start:end]

    def content_of(name: str, text: str) -> Any:
        return {
            "text": lambda: c.TextContent(text),
            "reasoning": lambda: c.ReasoningContent(text),
            "args1": lambda: c.ToolCallArgsContent("1", text),
            "args2": lambda: c.ToolCallArgsContent("2", text),
            "value_v": lambda: c.ToolCallArgsProgressContent("1", "v", 0, text),
            "value_w": lambda: c.ToolCallArgsProgressContent("1", "w", 0, text),
        }[name]()

    items: list[Any] = []
    while any(position[n] < len(texts[n]) for n in names):
        roll = rng.random()
        if roll < 0.45:
            chosen = [rng.choice(names[:-1]) for _ in range(rng.randint(1, 4))]
            items.append(R(contents=[content_of(n, take(n)) for n in chosen]))
        elif roll < 0.6:
            items.append(u.TextDelta(take("text")))
        elif roll < 0.7:
            items.append(u.ToolCallDelta(0, arguments_delta=take("legacy")))
        elif roll < 0.75:
            items.append(u.ToolCallStart("z", "f"))
        else:
            items.append(u.ReasoningDelta(take("reasoning")))
    return items, secrets


def test_interleaved_channels_split_anywhere_redact_like_each_joined_text() -> None:
    for seed in range(400):
        items, secrets = _mixed_stream(random.Random(seed))
        redactor = DeltaRedactor(secrets)
        written = [pair for i, item in enumerate(items) for pair in redactor.push(i, item)]
        written += redactor.flush()
        assert [stamp for stamp, _ in written] == list(range(len(items)))
        out = [item for _, item in written]
        for before, after in zip(items, out, strict=True):
            assert type(after) is type(before)
            if isinstance(before, R):
                assert [type(x) for x in after.contents] == [type(x) for x in before.contents]
        got = joined_by_channel(out)
        for channel, text in joined_by_channel(items).items():
            if ends_in_a_secret(text, secrets):  # the stream stopped inside a secret: hidden
                assert got[channel].endswith("[REDACTED]"), (seed, channel)
                # (each secret hidden: a short one where it stands as a whole word)
                assert got[channel] == redact_cut_short(text, tuple(secrets)), (seed, channel)
            else:
                assert got[channel] == redact_with(text, tuple(secrets)), (seed, channel)


@pytest.mark.parametrize(
    "secret", ["a.b*c+d?(e)[f]", "naïve-пароль-密码", "line one\nline two", "password"]
)
def test_odd_secrets_split_at_every_pair_of_points_never_reach_the_file(
    tmp_path: Path, secret: str
) -> None:
    text = f"say {secret}{secret[:3]} and {secret}"
    for a, b in itertools.combinations(range(len(text) + 1), 2):
        if b - a > 6 and a % 3:
            continue  # keep it fast: every cut near each other, a sample of the rest
        pieces = [text[:a], text[a:b], text[b:]]
        path = tmp_path / "r.jsonl"
        out = recorded([u.ReasoningDelta(p) for p in pieces], path, [secret])
        assert len(out) == 3
        assert "".join(i.delta for i in out) == f"say [REDACTED]{secret[:3]} and [REDACTED]"


def test_a_secret_over_five_deltas_with_other_channels_in_between(tmp_path: Path) -> None:
    parts = ["my key is sk-pr", "oj-01", "2345", "6789abcd", "efXYZ."]
    items: list[Any] = []
    for i, part in enumerate(parts):
        items.append(R(contents=[c.TextContent(part)]))
        items.append(R(contents=[c.ToolCallArgsContent("c", f'"{i}"')]))
        items.append(u.Usage(None))  # not a delta: keeps its place
    out = recorded(items, tmp_path / "r.jsonl")
    assert [type(i) for i in out] == [type(i) for i in items]
    text = "".join(
        x.text for i in out if isinstance(i, R) for x in i.contents if hasattr(x, "text")
    )
    assert text == "my key is [REDACTED]."
    raw = (tmp_path / "r.jsonl").read_text()
    assert not any(p in raw for p in ("sk-pr", "2345", "efXYZ"))


def test_several_contents_of_one_channel_in_one_chunk(tmp_path: Path) -> None:
    chunk = R(contents=[c.TextContent("hunter"), c.TextContent("2-hun"), c.TextContent("ter2!")])
    out = recorded([chunk, R(contents=[c.TextContent(" bye")])], tmp_path / "r.jsonl", [SECRET])
    assert [x.text for x in out[0].contents] == ["[REDACTED]", "", "!"]
    assert out[1] == R(contents=[c.TextContent(" bye")])


def test_complete_values_are_redacted_recursively(tmp_path: Path) -> None:
    items = [
        R(contents=[c.ToolCallArgsParsedContent("c", "h", {"auth": f"Bearer {KEY}"})]),
        R(contents=[c.ToolCallingContent("c", "f", {"h": [SECRET]}, json.dumps({"h": [SECRET]}))]),
    ]
    recorded(items, tmp_path / "r.jsonl", [SECRET])
    raw = (tmp_path / "r.jsonl").read_text()
    assert SECRET not in raw
    assert KEY not in raw


def test_a_stream_without_secrets_replays_equal(tmp_path: Path) -> None:
    """Held deltas (word starts like 's', 'b', '?') are written unchanged."""
    items: list[Any] = [u.ResponseMetadata("r", "m")]
    items += [u.TextDelta(w) for w in ["Is ", "s", "k", "y blue", "?", " b", "e", " sure &", "x"]]
    items += [u.ToolCallDelta(0, "c", "f", '{"q": "s'), u.ToolCallDelta(0, arguments_delta='k"}')]
    items += ["a plain string", {"k": "v"}, 42, None]  # not rafrx types
    items += [u.Finish(FinishReason.STOP)]
    path = tmp_path / "r.jsonl"
    assert recorded(items, path) == items
    assert replay(path).pipe(rx.to_list()).run() == items


def test_held_items_are_written_in_order_with_monotonic_times_on_error(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    source = reactivex.concat(
        reactivex.from_iterable(
            [u.TextDelta("b"), u.ToolCallStart("c", "f"), u.ToolCallArgs("c", '{"u": "?ke')]
        ),
        reactivex.throw(StreamInterrupted("cut")),
    )
    with pytest.raises(StreamInterrupted):
        record(source, path).run()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["kind"] for line in lines] == [
        *("header", "TextDelta", "ToolCallStart", "ToolCallArgs", "error"),
    ]
    times = [line["t"] for line in lines]
    assert times == sorted(times)


def test_recording_from_another_thread_with_a_dispose_while_items_are_held(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    source: Subject[Any] = Subject()
    seen: list[Any] = []
    subscription = record(source, path, secrets=[SECRET]).subscribe(seen.append)
    started, go_on = threading.Event(), threading.Event()

    def produce() -> None:
        for i in range(2000):
            source.on_next(u.TextDelta("ok " if i % 2 else "hunter2-"))
            if i == 1000:
                started.set()
                go_on.wait(5)

    thread = threading.Thread(target=produce)
    thread.start()
    assert started.wait(5)
    subscription.dispose()
    go_on.set()
    thread.join(5)
    items = load(path).items
    assert len(items) == 1001
    assert items[:-1] == seen[:1000]
    assert items[-1] == u.TextDelta("[REDACTED]")  # "hunter2-": the stream stopped in a secret
    lines = path.read_text().splitlines()
    times = [json.loads(line)["t"] for line in lines]
    assert times == sorted(times)


def test_record_sse_masks_a_whole_key_in_the_raw_bytes(tmp_path: Path) -> None:
    body = f'data: {{"choices": [{{"delta": {{"content": "key {KEY}"}}}}]}}\n\n'.encode()

    async def main() -> None:
        async def chunks() -> AsyncIterator[bytes]:
            yield body[:20]
            yield body[20:]

        assert [x async for x in record_sse(chunks(), tmp_path / "t.sse")] == [body[:20], body[20:]]

    asyncio.run(main())
    saved = (tmp_path / "t.sse").read_bytes()
    assert len(saved) == len(body)
    assert KEY.encode() not in saved


# ----------------------------------------------------------------- redaction bugs


def test_bug_a_secret_in_a_key_of_parsed_arguments_is_redacted(tmp_path: Path) -> None:
    """Complete argument values are redacted, keys included: a key like
    ``{"sk-…": …}`` (a header map, a credentials dict) must not reach the file."""
    items = [R(contents=[c.ToolCallingContent("c", "f", {"headers": {KEY: "x"}}, "")])]
    recorded(items, tmp_path / "r.jsonl")
    assert KEY not in (tmp_path / "r.jsonl").read_text()


def test_bug_a_numeric_secret_in_parsed_arguments_is_redacted(tmp_path: Path) -> None:
    """``raw_arguments`` is redacted, but the same secret as a parsed JSON number
    in ``arguments`` (and in a Parsed content's value) was written as is."""
    raw = '{"pin": 12345678}'
    items = [
        R(contents=[c.ToolCallArgsParsedContent("c", "pin", 12345678)]),
        R(contents=[c.ToolCallingContent("c", "f", json.loads(raw), raw)]),
    ]
    recorded(items, tmp_path / "r.jsonl", ["12345678"])
    assert "12345678" not in (tmp_path / "r.jsonl").read_text()


def test_bug_a_secret_escaped_in_raw_json_arguments_is_redacted(tmp_path: Path) -> None:
    """A tool call's raw arguments are JSON: a secret with a newline (a PEM key,
    a multi-line password) is always there as ``\\n``; the decoded value channel
    is redacted, the raw argument deltas were not."""
    secret = "line-one\nline-two"
    args = json.dumps({"password": secret})
    items = [u.ToolCallArgs("c", args[:15]), u.ToolCallArgs("c", args[15:])]
    out = recorded(items, tmp_path / "r.jsonl", [secret])
    written = "".join(i.args_delta for i in out)
    assert secret not in json.loads(written)["password"]


def test_bug_a_key_right_after_cjk_text_is_redacted(tmp_path: Path) -> None:
    """Chinese text puts no space before a key: ``是sk-…`` has no ASCII word
    boundary for ``\\bsk-`` (CJK characters are word characters in ``re``)."""
    items = [u.TextDelta("你的密钥是"), u.TextDelta(KEY)]
    recorded(items, tmp_path / "r.jsonl")
    assert KEY not in (tmp_path / "r.jsonl").read_text()


def test_bug_record_sse_masks_a_whole_key_after_a_prime(tmp_path: Path) -> None:
    """Masking reads the bytes as latin-1: the last UTF-8 byte of a prime, U+2032 (0xB2),
    reads as ``²``, a word character, so ``\\bsk-`` misses a key that the
    decoded text shows (``redact`` of the text catches it)."""
    text = f"x\u2032{KEY}"  # PRIME
    assert KEY not in redact_with(text, ())
    body = f'data: {{"choices": [{{"delta": {{"content": "{text}"}}}}]}}\n\n'.encode()

    async def main() -> None:
        async def chunks() -> AsyncIterator[bytes]:
            yield body

        assert [x async for x in record_sse(chunks(), tmp_path / "t.sse")] == [body]

    asyncio.run(main())
    assert KEY.encode() not in (tmp_path / "t.sse").read_bytes()


def test_bug_redaction_work_is_linear_in_a_long_token_like_run() -> None:
    """A long run that could still be a secret (``sk-`` + 8 kB of key characters,
    as in a base64 blob) is rescanned whole on every delta: quadratic work."""
    scanned = 0
    real = redaction_module._found

    def counting(text: str, secrets: Any, begin: int = 0, starts: Any = ()) -> Any:
        nonlocal scanned
        scanned += len(text)
        return real(text, secrets, begin, starts)

    pieces = ["see sk-", *(["abcd"] * 2000), " done"]
    with mock.patch.object(redaction_module, "_found", counting):
        redactor = DeltaRedactor([])
        out = [item for p in pieces for _, item in redactor.push(0, u.TextDelta(p))]
        out += [item for _, item in redactor.flush()]
    assert "".join(i.delta for i in out) == "see [REDACTED] done"
    total = sum(map(len, pieces))
    assert scanned < 20 * total, f"{scanned} characters scanned for {total}"


# ====================================================================== fragments


@contextlib.contextmanager
def compact_at(n: int) -> Iterator[None]:
    """Every keeper compacts after ``n`` fragments (the real value is 1024)."""
    modules = (json_stream_module, convert_module, flush_module, aggregate_module)
    with contextlib.ExitStack() as stack:
        for module in modules:
            stack.enter_context(mock.patch.object(module, "COMPACT_AT", n))
        yield


def _random_string(rng: random.Random) -> str:
    alphabet = ["a", "b", '"', "\\", "\n", "é", "😀", "\ud83d", "/", "\t", "\x01", "u"]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randint(0, 6 if depth < 3 else 3)
    if kind <= 1:
        return _random_string(rng)
    if kind == 2:
        return rng.choice([0, -1, 1.5, 1e300, -0.0, 10**30, True, False, None])
    if kind == 3:
        return rng.randint(-(10**6), 10**6)
    if kind == 4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {
        _random_string(rng)[:5]: _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))
    }


def _parse(text: str, cuts: list[int], mode: str, max_bytes: int | None, read: int) -> Any:
    parser = StreamingArgsParser(max_bytes=max_bytes)
    events: list[Any] = []
    bounds = [0, *sorted(cuts), len(text)]
    texts = []
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        fragment = text[a:b]
        grown = parser.grow(fragment) if mode == "grow" else None
        if grown is not None:
            events.append(ArgProgress(*grown))
        else:
            events.extend(parser.feed(fragment))
        if read and k % read == 0:
            texts.append(parser.text)
    try:
        end: Any = ("ok", json.dumps(parser.close()))
    except json.JSONDecodeError as exc:
        end = ("error", exc.msg, exc.pos, exc.doc)
    return events, end, parser.error, parser.text, texts


def test_parser_results_do_not_depend_on_when_fragments_are_compacted() -> None:
    """Any document (valid or not, escapes and surrogate pairs split anywhere),
    fed or grown, text read mid-stream, with or without max_bytes."""
    rng = random.Random(7)
    for _ in range(700):
        if rng.random() < 0.3:
            value = _random_value(rng)
        else:
            value = {f"k{i}": _random_value(rng) for i in range(rng.randint(0, 5))}
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.2:
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(["x", '"', "\\", "}", ",", "\\u12", "\x00"]) + text[i:]
        cuts = [rng.randint(0, len(text)) for _ in range(rng.randint(0, len(text)))]
        mode = rng.choice(["feed", "grow"])
        max_bytes = rng.choice([None, None, rng.randint(0, 2 * len(text) + 5)])
        read = rng.choice([0, 0, 3])
        reference = _parse(text, cuts, mode, max_bytes, read)
        for n in (1, 2, 3):
            with compact_at(n):
                assert _parse(text, cuts, mode, max_bytes, read) == reference, (text, cuts, n)


def _check_events(doc: str, events: list[Any]) -> None:
    expected = json.loads(doc)
    members = {e.name: e.value for e in events if isinstance(e, ArgMember)}
    assert json.dumps(members) == json.dumps(expected)
    for name, value in expected.items():
        if not isinstance(value, str):
            continue
        progress = [e for e in events if isinstance(e, ArgProgress) and e.name == name]
        assert "".join(e.fragment for e in progress) == value
        total = 0
        for before, event in itertools.pairwise([None, *progress]):
            total += len(event.fragment.encode("utf-8", "surrogatepass"))
            assert event.received == total
            if before is not None and before.fragment and event.fragment:
                pair = before.fragment[-1] + event.fragment[0]
                assert not ("\ud800" <= pair[0] <= "\udbff" and "\udc00" <= pair[1] <= "\udfff")


@pytest.mark.parametrize("step", [1, 3, 6, 7])
def test_long_arguments_with_escaped_surrogate_pairs_across_block_boundaries(step: int) -> None:
    """Several long string members of escaped emoji (\\ud83d\\ude00) and quotes,
    cut so that escapes straddle the 1024-fragment joins."""
    doc = json.dumps(
        {"a": '😀"\\é' * 900, "n": [1, {"x": "😀" * 600}], "b": "x😀" * 700, "c": 1.5},
        ensure_ascii=True,
    )
    assert len(doc) // step > 3 * COMPACT_AT
    parser = StreamingArgsParser()
    events: list[Any] = []
    for i in range(0, len(doc), step):
        fragment = doc[i : i + step]
        grown = parser.grow(fragment) if i % 2 else None
        events += [ArgProgress(*grown)] if grown else parser.feed(fragment)
        if i == len(doc) // 2:
            assert parser.text == doc[: i + step]
    assert json.dumps(parser.close()) == json.dumps(json.loads(doc))
    assert parser.text == doc
    _check_events(doc, events)


def test_invalid_json_found_after_compaction_reports_the_offset_and_the_whole_text() -> None:
    good = json.dumps({"content": "x" * 5000})
    doc = good[:-1] + ', "b": tru!}'
    parser = StreamingArgsParser()
    for ch in doc:
        parser.feed(ch)
    bad_at = doc.index("tru!")
    assert parser.error == f"Expecting value at offset {bad_at}"
    with pytest.raises(json.JSONDecodeError) as info:
        parser.close()
    assert (info.value.pos, info.value.doc) == (bad_at, doc)


def test_max_bytes_after_compaction_keeps_the_text_up_to_the_limit() -> None:
    doc = json.dumps({"content": "é" * 3000})
    parser = StreamingArgsParser(max_bytes=4000)
    kept = ""
    for ch in doc:
        parser.feed(ch)
        if parser.error is None:
            kept += ch
    assert parser.error is not None
    assert parser.error.startswith("arguments exceed 4000 bytes")
    assert parser.text == kept
    assert len(parser.text.encode()) <= 4000


def _tool_stream(doc: str, legacy: bool, step: int, call: str = "c") -> list[Any]:
    updates: list[Any] = []
    if legacy:
        updates.append(u.ToolCallDelta(0, id=call, name="write"))
    else:
        updates.append(u.ToolCallStart(call, "write"))
    for i in range(0, len(doc), step):
        piece = doc[i : i + step]
        if legacy:
            updates.append(u.ToolCallDelta(0, arguments_delta=piece))
        else:
            updates.append(u.ToolCallArgs(call, piece))
    if not legacy:
        updates.append(u.ToolCallEnd(call))
    return updates


def _piped(eager: bool) -> Any:
    return apart(
        ops.split_legacy_delta(),
        ops.accumulate_tool_calls(),
        ops.parse_args_stream(),
        ops.flush_tool_calls(eager),
    )


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("eager", [False, True])
def test_convert_equals_the_piped_operators_on_long_arguments(legacy: bool, eager: bool) -> None:
    docs = [
        json.dumps({"path": "a", "content": 'l"\\😀\n' * 900, "n": {"k": ["v"] * 500}}),
        json.dumps("😀\\" * 1500, ensure_ascii=False),
        json.dumps({"content": "x" * 4000})[:-3],  # cut short: invalid at the end
    ]
    updates: list[Any] = [u.ResponseMetadata("r", "m")]
    for k, doc in enumerate(docs):
        updates += _tool_stream(doc, legacy and k != 1, 2 if k else 1, f"c{k}")
    updates += [u.TextDelta("ok"), u.Finish(FinishReason.TOOL_CALLS)]
    fused = run_ops(updates, ops.convert(eager))
    assert fused == run_ops(updates, _piped(eager))
    out, errors = fused
    assert errors == []
    callings = [x for r in out for x in r.contents if isinstance(x, c.ToolCallingContent)]
    callings.sort(key=lambda x: x.call_id)  # eager: in end order
    assert [x.raw_arguments for x in callings] == docs
    assert callings[0].arguments == json.loads(docs[0])
    assert callings[1].arguments == json.loads(docs[1])
    assert callings[2].error is not None


def test_a_reused_call_id_keeps_both_long_calls() -> None:
    first = json.dumps({"content": "a" * 3000})
    second = json.dumps({"content": "b" * 3000})
    updates = [
        *_tool_stream(first, False, 1),
        u.Finish(FinishReason.TOOL_CALLS),
        *_tool_stream(second, False, 1),
        u.Finish(FinishReason.TOOL_CALLS),
    ]
    out, errors = run_ops(updates, ops.convert())
    assert errors == []
    callings = [x for r in out for x in r.contents if isinstance(x, c.ToolCallingContent)]
    assert [x.raw_arguments for x in callings] == [first, second]


def test_aggregate_text_and_reasoning_over_many_long_steps() -> None:
    updates: list[Any] = []
    text, reasoning = [], []
    for step in range(3):
        updates.append(u.ResponseMetadata(f"r{step}", "m"))
        for i in range(COMPACT_AT * 2 + 7):
            piece = f"{step}.{i}😀 " if i % 3 else ""
            updates += [u.ReasoningDelta(piece[::-1]), u.TextDelta(piece)]
            text.append(piece)
            reasoning.append(piece[::-1])
        updates.append(u.Finish(FinishReason.STOP))
    out, errors = run_ops(updates, ops.convert(), ops.aggregate())
    assert errors == []
    [response] = out
    assert response.text == "".join(text)
    assert response.reasoning_text == "".join(reasoning)
    per_step = [m.content for m in response.turn_transcript]
    size = len(text) // 3
    assert per_step == ["".join(text[k * size : (k + 1) * size]) for k in range(3)]


def test_fused_convert_memory_is_bounded_for_an_escaped_argument() -> None:
    """Every fragment holds an escape: the feed path, not grow()."""
    fragments = 30_000

    def stream() -> Iterator[Any]:
        yield u.ToolCallStart("c", "write")
        yield u.ToolCallArgs("c", '{"content": "')
        for _ in range(fragments):
            yield u.ToolCallArgs("c", '\\"ab')
        yield u.ToolCallArgs("c", '"}')
        yield u.ToolCallEnd("c")
        yield u.Finish(FinishReason.TOOL_CALLS)

    tracemalloc.start()
    try:
        reactivex.from_iterable(stream()).pipe(ops.convert()).subscribe(lambda _: None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12 * 4 * fragments
