"""Coverage-guided fuzzing of the SSE decoder and the dialects (atheris).

Each input picks a dialect and cut points, then a body. Checked:

* :class:`~rafrx.sse.SSEDecoder` gives the same events however the body is
  split (chunking invariance), and raises nothing but ``LimitExceeded``;
  one line per chunk, which takes the line-by-line path and none of the
  block loop's fast paths, gives them too;
* ``from_sse(body) → convert() → aggregate()`` ends with a response or a
  :class:`~rafrx.errors.RafrxError`, never another exception.

Run (see ``fuzz/README.md``)::

    python fuzz/fuzz_sse.py -max_total_time=300 fuzz/corpus/sse
"""

from __future__ import annotations

import itertools
import re
import sys

import atheris

with atheris.instrument_imports():
    from rafrx import operators as ops
    from rafrx.errors import LimitExceeded, RafrxError
    from rafrx.sources import from_sse
    from rafrx.sse import SSEDecoder

DIALECTS = ("openai-chat", "anthropic", "openai-responses")
LIMITS = {"max_line_bytes": 1 << 16, "max_event_bytes": 1 << 17}
LINE_END = re.compile(rb"[\r\n]")


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted({c % (len(body) + 1) for c in cuts}), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(points)]


def decode(chunks: list[bytes]) -> list[object] | str:
    decoder = SSEDecoder(**LIMITS)
    events: list[object] = []
    try:
        for chunk in chunks:
            events += decoder.feed(chunk)
        events += decoder.close()
    except LimitExceeded:
        return "limit"
    return events


def check(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    dialect = DIALECTS[fdp.ConsumeIntInRange(0, len(DIALECTS) - 1)]
    cuts = [fdp.ConsumeIntInRange(0, 1 << 16) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    body = fdp.ConsumeBytes(fdp.remaining_bytes())
    chunks = split(body, cuts)

    whole, pieces = decode([body]), decode(chunks)
    if pieces != whole and "limit" not in (whole, pieces):
        raise AssertionError(f"chunking changed the events: {whole!r} != {pieces!r}")
    lines = decode(split(body, [m.end() for m in LINE_END.finditer(body)]))
    if lines != whole and "limit" not in (whole, lines):
        raise AssertionError(f"line by line, the events differ: {whole!r} != {lines!r}")

    outcome: list[object] = []
    from_sse(chunks, dialect, **LIMITS).pipe(ops.convert(), ops.aggregate()).subscribe(
        outcome.append, outcome.append
    )
    if len(outcome) != 1:
        raise AssertionError(f"expected one response or one error, got {outcome!r}")
    if isinstance(outcome[0], Exception) and not isinstance(outcome[0], RafrxError):
        raise outcome[0]


def main() -> None:
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
