"""Two commits of rafrx on the same bodies, alternating: did a change make the pipeline slower?

Each commit is checked out into a temporary git worktree. For every round,
each commit runs every scenario in a fresh process of its own (its rafrx, its
``bench`` generator, the same seed), one commit after the other, so that
background load hits both alike. Reported: the minimum and median milliseconds
of ``from_sse → convert() → aggregate()`` per scenario, and the best over the
rounds, which is the figure to compare on a noisy machine.

    python -m bench.ab 7752192 HEAD --scenarios chat/tools4-seq,chat/write_file-100k

With ``--instructions``, each commit's pipeline runs instead under valgrind's
callgrind, once with no timed run and once with ``--runs`` of them over all the
scenarios: the difference, per run, is the instructions the pipeline executes,
a count the machine's load does not change (slower: keep ``--runs`` small).

    python -m bench.ab 27fd025 HEAD --instructions --runs 20

Example:
    >>> print(_table(["a"], {"old": [{"a": (1.0, 1.5)}], "new": [{"a": (1.1, 1.2)}]}))
    | scenario | old min / median ms | new min / median ms | new ÷ old (best) |
    | --- | --- | --- | --- |
    | a | 1.000 / 1.500 | 1.100 / 1.200 | 1.10x |
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["main"]

# Runs inside the worktree, with that commit's code: prints {scenario: [min, median]}.
_RUN = """
import json, statistics, sys, time
from bench.generate import build_scenarios, split_chunks
from bench.rafrx_pipeline import run_rafrx
names, runs = sys.argv[1].split(","), int(sys.argv[2])
scenarios = {s.name: s for s in build_scenarios(scale=1.0, arg_sizes=(10_000, 100_000))}
out = {}
for name in names:
    s = scenarios[name]
    chunks = split_chunks(s.body, seed=0)
    for _ in range(3):
        run_rafrx(chunks, s.dialect)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run_rafrx(chunks, s.dialect)
        times.append(time.perf_counter() - t)
    out[name] = [min(times) * 1e3, statistics.median(times) * 1e3]
print(json.dumps(out))
"""


# Runs inside the worktree under callgrind: the pipeline over the scenarios, ``runs`` times.
_COUNT = """
import sys
from bench.generate import build_scenarios, split_chunks
from bench.rafrx_pipeline import run_rafrx
names, runs = sys.argv[1].split(","), int(sys.argv[2])
scenarios = {s.name: s for s in build_scenarios(scale=1.0, arg_sizes=(10_000, 100_000))}
jobs = [(split_chunks(scenarios[n].body, seed=0), scenarios[n].dialect) for n in names]
for _ in range(runs + 1):  # (the first: imports and caches, in both counts)
    for chunks, dialect in jobs:
        run_rafrx(chunks, dialect)
"""


def _instructions(tree: Path, names: Sequence[str], runs: int) -> float:
    """Instructions per run of the pipeline over ``names`` (callgrind: 0 runs, then ``runs``)."""
    counts = []
    for n in (0, runs):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [
                    *("valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/callgrind.out"),
                    *(sys.executable, "-c", _COUNT, ",".join(names), str(n)),
                ],
                cwd=tree,
                # A fixed hash seed: string hashing moves dictionaries' probing, hence
                # the count, by up to about 4% between processes of the same code.
                env={**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"},
                capture_output=True,
                text=True,
                check=True,
            )
        counts.append(_collected(done.stderr))
    return (counts[1] - counts[0]) / runs


def _collected(report: str) -> int:
    """The instruction count in callgrind's report.

    Example:
        >>> _collected("==1== Events    : Ir\\n==1== Collected : 4974215767\\n")
        4974215767
    """
    found = re.search(r"Collected : (\d+)", report)
    if found is None:
        raise RuntimeError(f"no instruction count in callgrind's report: {report[-500:]}")
    return int(found.group(1))


def _measure(tree: Path, names: Sequence[str], runs: int) -> dict[str, tuple[float, float]]:
    done = subprocess.run(
        [sys.executable, "-c", _RUN, ",".join(names), str(runs)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    return {k: (v[0], v[1]) for k, v in json.loads(done.stdout).items()}


def _table(names: Sequence[str], results: dict[str, list[dict[str, tuple[float, float]]]]) -> str:
    old, new = results
    lines = [
        f"| scenario | {old} min / median ms | {new} min / median ms | {new} ÷ {old} (best) |",
        "| --- | --- | --- | --- |",
    ]
    for name in names:
        best = {rev: min(r[name][0] for r in results[rev]) for rev in (old, new)}
        cells = [
            f"{best[rev]:.3f} / {min(r[name][1] for r in results[rev]):.3f}" for rev in (old, new)
        ]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {best[new] / best[old]:.2f}x |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("old", help="the commit to compare against (any git revision)")
    parser.add_argument("new", help="the commit to measure")
    parser.add_argument(
        "--scenarios",
        default="chat/tools4-seq,anthropic/tools4-seq,chat/tools16-inter,chat/write_file-100k,chat/text",
        help="comma-separated scenario names (bench.generate; arguments of 10k and 100k)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--runs", type=int, default=40, help="timed runs per round (default 40)")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions (valgrind) instead"
    )
    args = parser.parse_args(argv)
    names = args.scenarios.split(",")
    if args.instructions:
        with _trees([args.old, args.new]) as trees:
            counts = {rev: _instructions(tree, names, args.runs) for rev, tree in trees.items()}
        old, new = counts[args.old], counts[args.new]
        print(f"| scenarios | {args.old} per run | {args.new} per run | {args.new} ÷ {args.old} |")
        print("| --- | --- | --- | --- |")
        print(f"| {', '.join(names)} | {old / 1e6:.2f} M | {new / 1e6:.2f} M | {new / old:.4f}x |")
        return
    results: dict[str, list[dict[str, tuple[float, float]]]] = {args.old: [], args.new: []}
    with _trees(list(results)) as trees:
        for round_ in range(args.rounds):
            for rev, tree in trees.items():
                results[rev].append(_measure(tree, names, args.runs))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    print(_table(names, results))


@contextlib.contextmanager
def _trees(revisions: Sequence[str]) -> Iterator[dict[str, Path]]:
    """A temporary git worktree of each revision, removed after."""
    with tempfile.TemporaryDirectory() as tmp:
        trees = {rev: Path(tmp) / f"tree{i}" for i, rev in enumerate(revisions)}
        for rev, tree in trees.items():
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
        try:
            yield trees
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
