"""Where rafrx's time goes on one benchmark scenario (cProfile, optionally pyinstrument).

Usage::

    python -m bench.profile chat/text                 # top functions by own time
    python -m bench.profile chat/tools16-inter --top 30
    python -m bench.profile anthropic/write_file-100k --pyinstrument

The scenario is generated and chunked exactly as ``bench.run`` does, and the
rafrx pipeline (``from_sse`` → ``convert()`` → ``aggregate()``) runs on it
``--runs`` times under the profiler. Functions are listed as
``file:line(function)`` with their own time, cumulative time and call count.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Sequence

from bench.generate import ARG_SIZES, build_scenarios, split_chunks
from bench.rafrx_pipeline import run_rafrx

__all__ = ["main", "profile_rafrx"]


def profile_rafrx(name: str, runs: int = 5, top: int = 20, seed: int = 0) -> str:
    """The cProfile table of rafrx on scenario ``name``, by own time."""
    scenario = next(s for s in build_scenarios(arg_sizes=ARG_SIZES, seed=seed) if s.name == name)
    chunks = split_chunks(scenario.body, seed=seed)
    run_rafrx(chunks, scenario.dialect)  # warm-up: imports, caches
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        run_rafrx(chunks, scenario.dialect)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", help="e.g. chat/text, anthropic/tools16-inter")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pyinstrument", action="store_true", help="a call tree instead")
    args = parser.parse_args(argv)
    if not args.pyinstrument:
        print(profile_rafrx(args.scenario, args.runs, args.top, args.seed))
        return 0
    try:
        from pyinstrument import Profiler
    except ImportError:
        print("pyinstrument is not installed (pip install pyinstrument)", file=sys.stderr)
        return 1
    scenarios = build_scenarios(arg_sizes=ARG_SIZES, seed=args.seed)
    scenario = next(s for s in scenarios if s.name == args.scenario)
    chunks = split_chunks(scenario.body, seed=args.seed)
    run_rafrx(chunks, scenario.dialect)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    for _ in range(args.runs):
        run_rafrx(chunks, scenario.dialect)
    profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
