"""Where rafrx's time goes, stage by stage, as shares of the limit loop's whole job.

Usage::

    python -m bench.stages                                   # the tool-call streams
    python -m bench.stages --scenarios chat/text,anthropic/write_file-100k --rounds 50
    python -m bench.stages --per-event          # one event per chunk, as a live stream

For each scenario (generated and chunked as ``bench.run`` does), each stage of
the rafrx pipeline runs alone over its own input, computed once beforehand:

* ``sse``: :class:`~rafrx.sse.SSEDecoder` over the chunks;
* ``dialect``: the dialect's ``feed`` over the decoded events;
* ``convert``: ``convert()``'s reducer over the updates;
* ``aggregate``: ``aggregate()``'s reducer over the results;

then ``pipeline`` is the whole ``from_sse(...).pipe(convert(), aggregate())``.
The runs take turns, ``--rounds`` times; each figure is a run's best time, as
milliseconds for the limit loop (``limit-json``) and as a ratio to it for the
rest. The four shares roughly add up to the pipeline's: a stage alone reads
its whole input from memory, built beforehand, where the fused pipeline hands
each item on while it is hot, and it saves the loops and the subscription
around the stages, so the sum can come out a little above or below.

Example:
    >>> rows = measure(["chat/tools4-seq"], rounds=1)
    >>> [stage for _, stage, _ in rows]
    ['limit-json', 'sse', 'dialect', 'convert', 'aggregate', 'pipeline']
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence
from functools import partial

from bench.generate import ARG_SIZES, build_scenarios, split_chunks, split_events
from bench.limit import limit_anthropic, limit_openai_chat
from bench.rafrx_pipeline import run_rafrx
from rafrx.operators._aggregate import ResponseAggregator
from rafrx.operators._convert import Converter
from rafrx.response import AgentResponseResult
from rafrx.sources.dialects import get_dialect
from rafrx.sse import ServerSentEvent, SSEDecoder
from rafrx.updates import AgentResponseUpdate

__all__ = ["measure"]

_DEFAULT = (
    "chat/tools4-seq,chat/tools16-inter,anthropic/tools4-seq,anthropic/tools16-inter,"
    "chat/text,anthropic/text"
)


def _best(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Best time of each run, the runs taking turns so that background load hits all alike."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for key, run in runs.items():
            start = time.perf_counter()
            run()
            best[key] = min(best[key], time.perf_counter() - start)
    return best


def _events(chunks: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events


def _dialect(name: str, events: list[ServerSentEvent]) -> list[AgentResponseUpdate]:
    dialect = get_dialect(name)
    updates: list[AgentResponseUpdate] = []
    for event in events:
        updates += dialect.feed(event)
        if dialect.done:
            break
    return updates + dialect.close()


def _convert(updates: list[AgentResponseUpdate]) -> list[AgentResponseResult]:
    converter = Converter()
    results: list[AgentResponseResult] = []
    for update in updates:
        results += converter.step(update)
    return results + list(converter.finish())


def _aggregate(results: list[AgentResponseResult]) -> object:
    aggregator = ResponseAggregator()
    for result in results:
        aggregator.step(result)
    return aggregator.finish()


def measure(
    names: Sequence[str], rounds: int = 30, per_event: bool = False
) -> list[tuple[str, str, float]]:
    """``(scenario, stage, best seconds)`` rows, the limit loop's first.

    With ``per_event``, one SSE event per chunk (as a live stream arrives)
    instead of 1-4 KB chunks.
    """
    sizes = ARG_SIZES if any("write_file" in name for name in names) else ()
    scenarios = {s.name: s for s in build_scenarios(arg_sizes=sizes, seed=0)}
    rows: list[tuple[str, str, float]] = []
    for name in names:
        scenario = scenarios[name]
        body = scenario.body
        chunks = split_events(body) if per_event else split_chunks(body, seed=0)
        dialect = scenario.dialect
        limit = limit_openai_chat if dialect == "openai-chat" else limit_anthropic
        events = _events(chunks)
        updates = _dialect(dialect, events)
        results = _convert(updates)
        runs: dict[str, Callable[[], object]] = {
            "limit-json": partial(limit, chunks),
            "sse": partial(_events, chunks),
            "dialect": partial(_dialect, dialect, events),
            "convert": partial(_convert, updates),
            "aggregate": partial(_aggregate, results),
            "pipeline": partial(run_rafrx, chunks, dialect),
        }
        gc.collect()
        gc.freeze()  # the inputs made above stay out of the collector's way
        best = _best(runs, rounds)
        gc.unfreeze()
        rows += [(name, stage, seconds) for stage, seconds in best.items()]
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Print a Markdown table: one row per scenario, one column per stage."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=_DEFAULT)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-event", action="store_true", help="one SSE event per chunk")
    args = parser.parse_args(argv)
    rows = measure(args.scenarios.split(","), args.rounds, args.per_event)
    stages = list(dict.fromkeys(stage for _, stage, _ in rows))
    print("| scenario | " + " | ".join(stages) + " |")
    print("| --- " * (len(stages) + 1) + "|")
    for name in dict.fromkeys(name for name, _, _ in rows):
        seconds = {stage: s for n, stage, s in rows if n == name}
        limit = seconds["limit-json"]
        cells = [f"{limit * 1e3:.3f} ms"]
        cells += [f"{seconds[stage] / limit:.2f}x" for stage in stages[1:]]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nBest of {args.rounds} interleaved runs each; stages as a share of limit-json's time.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
