"""Run the benchmark suite: every contender on the same bytes, in one process.

Usage (from the repository root, after ``pip install -e '.[bench]'``)::

    python -m bench.run                      # the full run behind bench/README.md
    python -m bench.run --quick              # a smaller run (seconds, not minutes)
    python -m bench.run --update-readme      # also rewrite the table in bench/README.md
    python -m bench.run --per-event --only rafrx --scenarios chat/text   # live-stream reads

Per scenario, the body is generated (seeded), cut into 1-4 KB chunks once
(``--per-event``: one chunk per SSE event, as a live stream arrives), and
every applicable contender reads that same chunk list. Each contender
first runs once untimed (its result is checked against the scenario's
expected result, and a peer's run is stopped at ``--cap`` seconds: a
quadratic peer on the 1 MB argument is then reported as a lower bound; the
limit loops, rafrx, ``ChatCompletionStreamState`` and the jiter re-parse,
which targets measure at 1 MB too, always run to the end). Then the timed
runs are interleaved across contenders (so background load hits all alike),
``--repeat`` of them (more, up to 50, for runs of a few milliseconds; fewer
when one run is long: ``--budget`` seconds per contender and scenario, and a
warm-up longer than 0.5 s counts as a run). Peak memory comes from a
separate run under tracemalloc (for the limit loops and rafrx always, for a
peer when its run takes at most 2 s).
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import report
from bench.contenders import CONTENDERS, Contender, applicable
from bench.generate import ARG_SIZES, Scenario, build_scenarios, split_chunks, split_events
from bench.measure import peak_memory, time_once, warm_up
from bench.outcome import Outcome
from bench.rafrx_pipeline import count_parse_events, run_rafrx

__all__ = ["main", "measure_scenario", "update_readme"]

# Peak memory is traced for these always, for the others when a run takes at
# most 2 s (tracing a quadratic peer's 20 s run would take minutes).
_ALWAYS_TRACED = frozenset({"limit-json", "limit-orjson", "rafrx"})
README = Path(__file__).resolve().parent / "README.md"


def measure_scenario(
    scenario: Scenario,
    contenders: Sequence[Contender],
    *,
    repeat: int = 7,
    budget: float = 10.0,
    cap: float | None = 10.0,
    memory: bool = True,
    seed: int = 0,
    log: bool = False,
    per_event: bool = False,
) -> list[report.Result]:
    """Measure ``contenders`` on one scenario (see the module docstring).

    With ``per_event``, the body is cut into one chunk per SSE event (as a live
    stream arrives) instead of 1-4 KB chunks.
    """
    for c in contenders:
        if c.prepare is not None:
            c.prepare()
    # Everything allocated so far (imported peers, the bodies) leaves the
    # collector's view while measuring: a collection during a timed run then
    # costs what it would in a process running that contender alone.
    gc.collect()
    gc.freeze()
    try:
        chunks = split_events(scenario.body) if per_event else split_chunks(scenario.body, seed)
        return _measure(scenario, chunks, contenders, repeat, budget, cap, memory, log)
    finally:
        gc.unfreeze()


def _measure(
    scenario: Scenario,
    chunks: list[bytes],
    contenders: Sequence[Contender],
    repeat: int,
    budget: float,
    cap: float | None,
    memory: bool,
    log: bool,
) -> list[report.Result]:
    expected = Outcome.of(scenario.expected)
    samples: dict[str, list[float]] = {}
    runs: dict[str, int] = {}
    state: dict[str, tuple[bool, float, bool | None]] = {}
    first_seconds: dict[str, float] = {}
    for c in contenders:
        first = warm_up(c.run, chunks, scenario.dialect, cap if c.capped else None)
        first_seconds[c.key] = first.seconds
        correct = None if first.outcome is None else first.outcome == expected
        state[c.key] = (first.complete, first.fraction, correct)
        if not first.complete:
            samples[c.key] = [first.seconds]
            runs[c.key] = 1
        else:
            # A long warm-up counts as a run; quick contenders run more often
            # (up to about a second, at most 50 runs) for steadier statistics.
            t = max(first.seconds, 1e-6)
            samples[c.key] = [t] if t >= 0.5 else []
            runs[c.key] = max(1, min(max(repeat, int(1.0 // t)), 50, int(budget // t)))
        if log:
            status = "ok" if correct else ("capped" if correct is None else "WRONG")
            print(f"  {c.key:13} warm-up {first.seconds * 1000:9.1f} ms {status}", file=sys.stderr)
    for _ in range(max(runs.values(), default=0)):
        for c in contenders:
            if len(samples[c.key]) < runs[c.key]:
                samples[c.key].append(time_once(c.run, chunks, scenario.dialect))
    results: list[report.Result] = []
    for c in contenders:
        complete, fraction, correct = state[c.key]
        peak = progress = parsed = None
        counted = c.key == "rafrx" and scenario.kind == "args"
        if counted and memory and complete:  # rafrx: always traced
            # One run gives both: the memory peak and the parse-event counts.
            counts = [0, 0]
            peak = peak_memory(
                functools.partial(run_rafrx, counts=counts), chunks, scenario.dialect
            )
            progress, parsed = counts
        elif counted:
            progress, parsed = count_parse_events(chunks, scenario.dialect)
        elif memory and complete and (c.key in _ALWAYS_TRACED or first_seconds[c.key] <= 2.0):
            peak = peak_memory(c.run, chunks, scenario.dialect)
        results.append(
            report.Result(
                scenario,
                c.key,
                tuple(samples[c.key]),
                complete,
                fraction,
                correct,
                peak,
                progress,
                parsed,
            )
        )
    return results


def update_readme(text: str, section: str = "results") -> None:
    """Replace the text between ``<!-- {section}:start/end -->`` in bench/README.md."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    content = README.read_text(encoding="utf-8")
    head, rest = content.split(start, 1)
    _, tail = rest.split(end, 1)
    README.write_text(f"{head}{start}\n{text}\n{end}{tail}", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; prints the Markdown report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller bodies and arguments")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per contender")
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds of timed runs per contender/scenario (default 10, --quick 3)",
    )
    parser.add_argument(
        "--cap",
        type=float,
        help="stop a peer's run after this many seconds, 0: never (default 10, --quick 3)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    parser.add_argument("--only", help="comma-separated contender keys (the limit loop stays)")
    parser.add_argument("--scenarios", help="comma-separated scenario names or prefixes")
    parser.add_argument(
        "--per-event", action="store_true", help="one SSE event per chunk, as a live stream"
    )
    parser.add_argument("--update-readme", action="store_true", help="rewrite bench/README.md")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    default = 3.0 if args.quick else 10.0
    budget = default if args.budget is None else args.budget
    cap = default if args.cap is None else args.cap
    if args.quick:
        scenarios = build_scenarios(scale=0.2, arg_sizes=(10_000, 30_000, 100_000), seed=args.seed)
    else:
        scenarios = build_scenarios(arg_sizes=ARG_SIZES, seed=args.seed)
    if args.scenarios:
        wanted = args.scenarios.split(",")
        scenarios = [s for s in scenarios if any(s.name.startswith(w) for w in wanted)]
    only = None if args.only is None else {report.BASELINE, *args.only.split(",")}
    skipped = {c.key: c.missing for c in CONTENDERS if c.missing is not None}

    results: list[report.Result] = []
    for scenario in scenarios:
        print(f"{scenario.name}: {len(scenario.body) / 1e6:.2f} MB", file=sys.stderr)
        results.extend(
            measure_scenario(
                scenario,
                applicable(scenario, only),
                repeat=args.repeat,
                budget=budget,
                cap=cap or None,
                memory=not args.no_memory,
                seed=args.seed,
                log=True,
                per_event=args.per_event,
            )
        )
    command = "python -m bench.run " + " ".join(sys.argv[1:] if argv is None else argv)
    text = "\n".join(
        [
            report.machine(),
            f"- command: `{command.strip()}` ({time.perf_counter() - started:.0f} s)",
            "",
            report.markdown(results, skipped),
        ]
    )
    print(text)
    if args.update_readme:
        update_readme(text)
    wrong = [r for r in results if r.correct is False]
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
