"""Warm and cold CPU caches: why short streams cost rafrx more in the full run.

Usage::

    python -m bench.cache                       # chat/tools4-seq, chat/tools16-inter
    python -m bench.cache --scenarios anthropic/tools4-seq --rounds 60

For each scenario the limit loop and rafrx run alternately, three ways:
*warm* (back to back, as a server streaming all day would), *evicted* (8 MB
of memory touched before each run, which pushes code and data out of the CPU
caches) and *after-peer* (the provider SDK's contender runs before each, as in
``bench.run``'s interleaved rounds). Medians; the ratio is rafrx ÷ the limit
loop. rafrx runs ~170 Python functions per stream (the limit loop one), so
it has more to fetch again after an eviction: a fixed cost per stream that
weighs on a 78-event stream and hardly on a long one.

Example:
    >>> rows = measure(["chat/tools4-seq"], rounds=1)
    >>> [mode for _, mode, *_ in rows][:2]  # then 'after-peer' if the SDK is installed
    ['warm', 'evicted']
"""

from __future__ import annotations

import argparse
import functools
import gc
import time
from collections.abc import Callable, Sequence

from bench.contenders import CONTENDERS
from bench.generate import ARG_SIZES, build_scenarios, split_chunks
from bench.rafrx_pipeline import run_rafrx

__all__ = ["measure"]

_EVICT = bytearray(8 << 20)


def _evict() -> None:
    """Touch one byte per cache line of 8 MB (more than this machine's L2 + L3 share)."""
    buffer = _EVICT
    for i in range(0, len(buffer), 64):
        buffer[i] ^= 1


def _median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


def measure(names: Sequence[str], rounds: int = 40) -> list[tuple[str, str, float, float]]:
    """``(scenario, mode, limit ms, rafrx ms)`` for each scenario and mode (medians)."""
    contenders = {c.key: c for c in CONTENDERS}
    sizes = ARG_SIZES if any("write_file" in name for name in names) else ()
    scenarios = {s.name: s for s in build_scenarios(arg_sizes=sizes, seed=0)}
    rows = []
    for name in names:
        scenario = scenarios[name]
        chunks = split_chunks(scenario.body, seed=0)
        dialect = scenario.dialect
        peer = contenders["openai" if dialect == "openai-chat" else "anthropic"]
        befores: dict[str, Callable[[], object] | None] = {"warm": None, "evicted": _evict}
        if peer.missing is None:  # the SDK is installed
            if peer.prepare is not None:
                peer.prepare()
            befores["after-peer"] = functools.partial(peer.run, chunks, dialect)
        limit = contenders["limit-json"].run
        gc.collect()
        gc.freeze()  # as bench.run does: imported modules and the body out of the collector's way
        for mode, before in befores.items():
            times: dict[str, list[float]] = {"limit": [], "rafrx": []}
            for _ in range(rounds):
                for key, run in (("limit", limit), ("rafrx", run_rafrx)):
                    if before is not None:
                        before()
                    gc.collect()
                    start = time.perf_counter()
                    run(chunks, dialect)
                    times[key].append(time.perf_counter() - start)
            rows.append((name, mode, _median(times["limit"]) * 1e3, _median(times["rafrx"]) * 1e3))
        gc.unfreeze()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="chat/tools4-seq,chat/tools16-inter")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    print("| scenario | caches | limit-json ms | rafrx ms | rafrx ÷ limit |")
    print("| --- | --- | --- | --- | --- |")
    for name, mode, limit_ms, rafrx_ms in measure(args.scenarios.split(","), args.rounds):
        ratio = rafrx_ms / limit_ms
        print(f"| {name} | {mode} | {limit_ms:.3f} | {rafrx_ms:.3f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
