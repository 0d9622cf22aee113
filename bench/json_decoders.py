"""Why the dialects decode with msgspec: JSON decoders, and the typed fast paths.

Usage::

    python -m bench.json_decoders                  # chat and Anthropic text and tools4
    python -m bench.json_decoders --scenarios chat/tools16-inter --repeat 9

Two tables, on the ``data:`` payloads of the benchmark scenarios (same
generator and seed as ``bench.run``):

* *decode*: microseconds per payload for ``json.loads``, ``orjson.loads`` (if
  installed) and ``msgspec.json.decode`` into dicts, the way ``load_object``
  reads an event;
* *dialect*: microseconds per event for the dialect's ``feed`` as it is (a
  payload that fits the typed structs is decoded straight into them) and with
  the typed path switched off (every payload through ``load_object`` and the
  dict walk), the choice this script was written to measure.

Best of ``--repeat`` rounds of ``--rounds`` passes over the payloads.

Example:
    >>> rows = measure(["anthropic/text"], repeat=1, rounds=1)
    >>> [row[0] for row in rows]
    ['anthropic/text']
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn
from unittest import mock

import msgspec

from bench.generate import ARG_SIZES, build_scenarios
from rafrx.sources.dialects import anthropic, get_dialect, openai_chat
from rafrx.sse import ServerSentEvent, SSEDecoder

__all__ = ["measure"]

_DEFAULT = "chat/text,chat/tools4-seq,anthropic/text,anthropic/tools4-seq"


def _best(run: Callable[[], Any], count: int, repeat: int, rounds: int) -> float:
    """Best time per item, in microseconds, of ``rounds`` calls of ``run``."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(rounds):
            run()
        best = min(best, (time.perf_counter() - start) / rounds / count)
    return best * 1e6


def _decode_all(loads: Callable[[str], Any], payloads: list[str]) -> Callable[[], Any]:
    return lambda: [loads(p) for p in payloads]


def _fits_nothing(data: str) -> NoReturn:
    """Stands in for a dialect's typed decoder: every payload goes the general way."""
    raise msgspec.DecodeError("fits nothing")


def _feed_all(dialect_name: str, events: list[ServerSentEvent]) -> Callable[[], Any]:
    def run() -> None:
        dialect = get_dialect(dialect_name)
        for event in events:
            dialect.feed(event)

    return run


def measure(
    names: Sequence[str], repeat: int = 7, rounds: int = 50
) -> list[tuple[str, int, dict[str, float], float, float]]:
    """Per scenario: name, payloads, µs per decode by decoder, µs per event typed and not."""
    scenarios = {s.name: s for s in build_scenarios(arg_sizes=ARG_SIZES, seed=0)}
    decoders: dict[str, Callable[[str], Any]] = {
        "json": json.loads,
        "msgspec": msgspec.json.decode,
    }
    with contextlib.suppress(ImportError):
        decoders["orjson"] = importlib.import_module("orjson").loads
    rows = []
    for name in names:
        scenario = scenarios[name]
        events = SSEDecoder().feed(scenario.body)
        payloads = [e.data for e in events if e.data.startswith("{")]
        decode = {
            label: _best(_decode_all(loads, payloads), len(payloads), repeat, rounds)
            for label, loads in decoders.items()
        }
        feed = _feed_all(scenario.dialect, events)
        typed = _best(feed, len(events), repeat, rounds)
        with (
            mock.patch.object(openai_chat, "_decode_first", _fits_nothing),
            mock.patch.object(openai_chat, "_decode_chunk", _fits_nothing),
            mock.patch.object(anthropic, "_decode_block_delta", _fits_nothing),
        ):
            general = _best(feed, len(events), repeat, rounds)
        rows.append((name, len(payloads), decode, typed, general))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=_DEFAULT, help="comma-separated names")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args(argv)
    rows = measure(args.scenarios.split(","), args.repeat, args.rounds)
    labels = list(rows[0][2]) if rows else []
    print("| scenario | payloads | " + " | ".join(f"{x} µs" for x in labels) + " |")
    print("| --- | --- |" + " --- |" * len(labels))
    for name, count, decode, _, _ in rows:
        cells = " | ".join(f"{decode[x]:.2f}" for x in labels)
        print(f"| {name} | {count} | {cells} |")
    print()
    print("| scenario | dialect µs/event, typed path | without it | speed-up |")
    print("| --- | --- | --- | --- |")
    for name, _, _, typed, general in rows:
        print(f"| {name} | {typed:.2f} | {general:.2f} | {general / typed:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
