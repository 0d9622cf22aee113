"""Secrets that a stream splits between its deltas never reach a recording in pieces."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import reactivex
from hypothesis import assume, given, settings
from reactivex import operators as rx
from reactivex.subject import Subject

from rafrx import content as c
from rafrx import updates as u
from rafrx._redaction import DeltaRedactor
from rafrx.errors import IncompleteStream, StreamInterrupted
from rafrx.recorder import load, record, redact, replay
from rafrx.response import AgentResponseResult, FinishReason

SECRET = "hunter2-hunter2"
KEY = "sk-proj-0123456789abcdefXYZ"


def ends_in_a_secret(text: str, secrets: list[str]) -> bool:
    """Whether ``text`` ends in the first 4 or more characters of a secret (not all)."""
    return any(text.endswith(s[:k]) for s in secrets for k in range(4, len(s)))


def cuts(text: str, points: list[int]) -> list[str]:
    """``text`` split at ``points`` (any order, repeats allowed: empty pieces)."""
    bounds = [0, *sorted(p % (len(text) + 1) for p in points), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def recorded(items: list[Any], path: Path, secrets: list[str]) -> list[Any]:
    passed = record(reactivex.from_iterable(items), path, secrets=secrets).pipe(rx.to_list())
    assert passed.run() == items  # subscribers see the originals
    return load(path).items


# Text with the secret, a key-shaped token and near misses (prefixes, word
# boundaries, URL parameters, bearer tokens) in it.
_words = st.sampled_from(
    [
        *(SECRET, KEY, "hunter2", "hunter", "sk-", "ask-0123456789abcdefXYZ"),
        *("?key=v4lue&", "&token=", "?", "=", "Bearer abcdefgh123", "bearer ", "bear", "b"),
        *("AIza", "AIzaSyA0123456789012345678901234567", "abab", "aba", "ab", "x"),
        *(" ", "-", "a", "s", "k", "é", "\n"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(_words, max_size=12).map("".join), points=st.lists(st.integers(0, 400)))
def test_text_deltas_redact_like_the_joined_text(
    tmp_path_factory: pytest.TempPathFactory, text: str, points: list[int]
) -> None:
    assume(not ends_in_a_secret(text, [SECRET]))  # (pinned apart: a stream stopped in a secret)
    path = tmp_path_factory.mktemp("rec") / "turn.jsonl"
    items: list[Any] = [u.TextDelta(piece) for piece in cuts(text, points)]
    items.append(u.Finish(FinishReason.STOP))

    out = recorded(items, path, [SECRET])

    assert [type(i) for i in out] == [type(i) for i in items]
    assert "".join(i.delta for i in out[:-1]) == redact(text, [SECRET])
    raw = path.read_text(encoding="utf-8")
    assert SECRET not in raw
    times = [line["t"] for line in map(json.loads, raw.splitlines())]
    assert times == sorted(times)


@settings(max_examples=500, deadline=None)
@given(
    text=st.lists(_words, max_size=16).map("".join),
    points=st.lists(st.integers(0, 400)),
    secrets=st.lists(st.sampled_from([SECRET, "abab", "x"]), max_size=3, unique=True),
)
def test_any_split_and_secrets_redact_like_the_joined_text(
    text: str, points: list[int], secrets: list[str]
) -> None:
    """Overlapping, adjacent and one-letter secrets included."""
    assume(not ends_in_a_secret(text, secrets))  # (pinned apart: a stream stopped in a secret)
    redactor = DeltaRedactor(secrets)
    pieces = cuts(text, points)
    written = [out for p in pieces for out in redactor.push(0, u.TextDelta(p))]
    written += redactor.flush()
    assert len(written) == len(pieces)
    assert "".join(item.delta for _, item in written) == redact(text, secrets)


def test_a_secret_in_one_letter_deltas_is_never_written() -> None:
    redactor = DeltaRedactor([SECRET])
    text = f"the code is {SECRET}, keep it"
    written = [item for ch in text for _, item in redactor.push(0, u.TextDelta(ch))]
    written += [item for _, item in redactor.flush()]
    assert len(written) == len(text)
    joined = "".join(i.delta for i in written)
    assert joined == "the code is [REDACTED], keep it"
    assert not any(ch in "hunter2" for i in written[12 : 12 + len(SECRET)] for ch in i.delta)


def test_interleaved_calls_are_redacted_per_call(tmp_path: Path) -> None:
    """Call a streams the key while call b's fragments arrive in between."""
    a = cuts(json.dumps({"env": f"OPENAI_API_KEY={KEY}"}), [3, 19, 21, 30, 33, 41])
    b = cuts(json.dumps({"path": "sk-notes.txt"}), [4, 12, 14, 17])
    chunks = []
    for i in range(max(len(a), len(b))):
        for call, parts in (("a", a), ("b", b)):
            if i < len(parts):
                chunks.append(AgentResponseResult(contents=[c.ToolCallArgsContent(call, parts[i])]))

    out = recorded(chunks, tmp_path / "calls.jsonl", [])

    def joined(call: str) -> str:
        return "".join(x.args_delta for chunk in out for x in chunk.contents if x.call_id == call)

    assert len(out) == len(chunks)
    assert joined("a") == redact("".join(a)) == '{"env": "OPENAI_API_KEY=[REDACTED]"}'
    assert joined("b") == "".join(b)  # no key there, whatever its pieces looked like
    assert "0123456789" not in (tmp_path / "calls.jsonl").read_text()


@pytest.mark.parametrize(
    "item",
    [
        lambda s: u.ReasoningDelta(s),
        lambda s: u.ToolCallDelta(0, arguments_delta=s),
        lambda s: u.ToolCallArgs("call_1", s),
        lambda s: AgentResponseResult(contents=[c.TextContent(s)]),
        lambda s: AgentResponseResult(contents=[c.ReasoningContent(s)]),
        lambda s: AgentResponseResult(contents=[c.ToolCallArgsProgressContent("x", "v", 0, s)]),
    ],
)
def test_every_delta_channel_is_redacted_across_items(tmp_path: Path, item: Any) -> None:
    pieces = ["the key: sk-pr", "oj-01234", "56789abcd", "efXYZ!"]
    out = recorded([item(p) for p in pieces], tmp_path / "r.jsonl", [])
    assert len(out) == len(pieces)
    raw = (tmp_path / "r.jsonl").read_text()
    assert not any(piece in raw for piece in ("sk-pr", "01234", "efXYZ"))
    assert raw.count("[REDACTED]") == 1


def test_other_items_keep_their_place_behind_a_held_delta(tmp_path: Path) -> None:
    items = [
        u.TextDelta("code: hunter2-"),
        u.ToolCallStart("call_1", "f"),
        u.TextDelta("hunter2."),
        u.Finish(FinishReason.STOP),
    ]
    out = recorded(items, tmp_path / "r.jsonl", [SECRET])
    assert out == [
        u.TextDelta("code: [REDACTED]"),
        u.ToolCallStart("call_1", "f"),
        u.TextDelta("."),
        u.Finish(FinishReason.STOP),
    ]


def test_held_deltas_are_written_when_the_stream_fails(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    failing = reactivex.concat(
        reactivex.of(u.TextDelta("hunter2-hun")),
        reactivex.throw(StreamInterrupted("dropped")),
    )
    with pytest.raises(StreamInterrupted):
        record(failing, path, secrets=[SECRET]).run()
    # the stream stopped inside what may be the secret: that much of it is hidden
    assert load(path).items == [u.TextDelta("[REDACTED]")]
    assert isinstance(load(path).error, StreamInterrupted)


def test_held_deltas_are_written_when_the_subscriber_disposes(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    source: Subject[Any] = Subject()
    seen: list[Any] = []
    subscription = record(source, path, secrets=[SECRET]).subscribe(seen.append)
    source.on_next(u.TextDelta("ok "))
    source.on_next(u.TextDelta("hunter2"))
    subscription.dispose()
    source.on_next(u.TextDelta("-hunter2"))  # after the dispose: neither seen nor written

    assert seen == [u.TextDelta("ok "), u.TextDelta("hunter2")]
    assert load(path).items == [u.TextDelta("ok "), u.TextDelta("[REDACTED]")]
    replayed: list[Any] = []
    errors: list[Exception] = []
    replay(path).subscribe(replayed.append, errors.append)
    assert replayed == load(path).items
    assert isinstance(errors[0], IncompleteStream)


def test_a_stream_that_stops_inside_a_secret_hides_that_much_of_it() -> None:
    """Four characters or more of a secret at the very end are hidden; fewer
    (too common to tell) and anything short of a key's pattern are kept."""
    for text, kept in [
        ("code hunter2-hun", "code [REDACTED]"),
        ("code hunt", "code [REDACTED]"),
        ("code hun", "code hun"),
        ("key sk-proj-01", "key sk-proj-01"),
    ]:
        redactor = DeltaRedactor([SECRET])
        written = [*redactor.push(0, u.TextDelta(text)), *redactor.flush()]
        assert [item.delta for _, item in written] == [kept]


def test_a_long_key_run_is_redacted_in_linear_work() -> None:
    """A key that goes on and on is settled as it grows: each push looks at a
    short context, not at the whole run held back."""
    redactor = DeltaRedactor([])
    run = ["see sk-", *["abcd"] * 20_000, " done"]
    written = [item for piece in run for _, item in redactor.push(0, u.TextDelta(piece))]
    written += [item for _, item in redactor.flush()]
    assert len(written) == len(run)
    assert "".join(i.delta for i in written) == "see [REDACTED] done"
    assert max(len(p.before) + len(p.text) for p in redactor._channels.values()) < 64
