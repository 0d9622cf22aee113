"""Benchmark :class:`rafrx.json_stream.StreamingArgsParser` on a streamed ``write_file`` call.

Run ``python bench/bench_args.py [--repeat 3] [--seed 7]``. The arguments are
``json.dumps({"path": ..., "content": <Python-like source>})`` for 10 KB,
100 KB and 1 MB of source, fed in random 3-8 character fragments (seeded), as
an LLM streams them. Contenders:

* ``rafrx``: ``StreamingArgsParser``, every event collected, then ``close()``.
* ``naive``: append each delta to a buffer and ``json.loads`` a repaired prefix
  (close the open string and object) to show the partial arguments. Each delta
  re-parses everything, so it is quadratic: run for 10 KB and 100 KB only.
* ``jiter``: the same per-delta re-parse with ``jiter.from_json(...,
  partial_mode="trailing-strings")`` (Rust), if jiter is installed.

Times are CPU seconds per run (``time.process_time``, so other load on the
machine matters less): the best of ``--repeat`` samples, where a rafrx sample
runs 1 MB worth of arguments (100 runs at 10 KB) so every size sees the same
conditions; the quadratic contenders run once at 100 KB. MB/s is of UTF-8
argument bytes. The script ends with
the log-log slope of rafrx's time against size, which must be at most 1.1
(linear); the exit status is 1 if it is not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from rafrx.json_stream import ArgEvent, ArgMember, StreamingArgsParser

SIZES = [("10 KB", 10_000), ("100 KB", 100_000), ("1 MB", 1_000_000)]
QUADRATIC_LIMIT = 100_000

LINES = [
    "def {name}(path: str, *, retries: int = {n}) -> dict[str, object]:",
    '    """Load {name} from ``path`` (tries {n} times)."""',
    "    for attempt in range({n}):",
    '        print(f"attempt {{attempt}}:\\t{{path!r}}")',
    '    data = {{"name": "{name}", "size": {n}, "ok": True}}',
    "    if not data:  # nothing read: bail out",
    '        raise ValueError("empty file: \\"{name}\\"")',
    "    pattern = re.compile(r'\\d+\\.\\d*')",
    '    greeting = "naïve café — ünïcödé 😀 {n}"',
    "    return data",
    "",
    "class {cls}(Base):",
    "\tvalue = {n}  # tab-indented on purpose",
    "    windows = 'C:\\\\Users\\\\{name}'",
    "",
]


def make_source(size: int, rng: random.Random) -> str:
    """Python-like source of exactly ``size`` characters."""
    out: list[str] = []
    total = 0
    while total < size:
        n = rng.randrange(1000)
        line = rng.choice(LINES).format(name=f"load_{n}", cls=f"Model{n}", n=n) + "\n"
        out.append(line)
        total += len(line)
    return "".join(out)[:size]


def make_fragments(text: str, rng: random.Random) -> list[str]:
    """Split ``text`` into random 3-8 character fragments."""
    frags: list[str] = []
    i = 0
    while i < len(text):
        step = rng.randint(3, 8)
        frags.append(text[i : i + step])
        i += step
    return frags


def run_rafrx(frags: list[str]) -> Any:
    parser = StreamingArgsParser()
    events: list[ArgEvent] = []
    for frag in frags:
        events.extend(parser.feed(frag))
    value = parser.close()
    assert [e.name for e in events if isinstance(e, ArgMember)] == ["path", "content"]
    return value


def _repair_loads(buf: str) -> Any:
    for closer in ('"}', "}", ""):
        try:
            return json.loads(buf + closer)
        except ValueError:
            continue
    return None


def run_naive(frags: list[str]) -> Any:
    buf = ""
    value: Any = None
    for frag in frags:
        buf += frag
        value = _repair_loads(buf) or value
    return value


def run_jiter(frags: list[str]) -> Any:
    import jiter

    buf = ""
    value: Any = None
    for frag in frags:
        buf += frag
        with contextlib.suppress(ValueError):
            value = jiter.from_json(buf.encode(), partial_mode="trailing-strings")
    return value


def best_of(
    fn: Callable[[list[str]], Any], frags: list[str], expected: Any, repeat: int, batch: int
) -> float:
    """Best of ``repeat`` samples; a sample times ``batch`` runs and divides."""
    assert fn(frags) == expected, f"{fn.__name__} returned a different value"
    best = math.inf
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(batch):
            fn(frags)
        best = min(best, (time.process_time() - start) / batch)
    return best


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    num = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
    return num / sum((a - mx) ** 2 for a in lx)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    try:
        import jiter  # noqa: F401

        contenders = ["rafrx", "naive", "jiter"]
    except ImportError:
        contenders = ["rafrx", "naive"]
    runners = {"rafrx": run_rafrx, "naive": run_naive, "jiter": run_jiter}

    header = f"{'size':>7} {'arg bytes':>10} {'frags':>7}"
    for name in contenders:
        header += f" {name + ' s':>11} {name + ' MB/s':>11}"
    print(header)
    xs: list[float] = []
    ys: list[float] = []
    for label, size in SIZES:
        rng = random.Random(f"{args.seed}-{size}")
        content = make_source(size, rng)
        expected = {"path": f"src/pkg/module_{size}.py", "content": content}
        text = json.dumps(expected)
        frags = make_fragments(text, rng)
        nbytes = len(text.encode())
        row = f"{label:>7} {nbytes:>10} {len(frags):>7}"
        for name in contenders:
            if name != "rafrx" and size > QUADRATIC_LIMIT:
                row += f" {'-':>11} {'-':>11}"
                continue
            if name == "rafrx":  # samples of about 1 MB each, so load affects all sizes alike
                repeat, batch = args.repeat, max(1, 1_000_000 // size)
            else:
                repeat, batch = (1 if size >= QUADRATIC_LIMIT else args.repeat), 1
            seconds = best_of(runners[name], frags, expected, repeat, batch)
            if name == "rafrx":
                xs.append(nbytes)
                ys.append(seconds)
            row += f" {seconds:>11.4f} {nbytes / seconds / 1e6:>11.2f}"
        print(row, flush=True)
    k = slope(xs, ys)
    verdict = "OK" if k <= 1.1 else "FAIL (> 1.1)"
    print(f"\nrafrx log-log slope of time vs size: {k:.3f}  {verdict}")
    return 0 if k <= 1.1 else 1


if __name__ == "__main__":
    sys.exit(main())
