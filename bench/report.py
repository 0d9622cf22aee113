"""What a benchmark run found: per-scenario rows, scaling exponents, targets, as Markdown.

Every figure is also given as a ratio to the stdlib limit loop
(``limit-json``) measured in the same run on the same bytes. Times of a run
stopped at its cap are lower bounds, printed with ``≥``.

Example:
    >>> loglog_slope([1e4, 1e5, 1e6], [0.01, 0.1, 1.0])
    1.0
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path

import attrs

from bench.generate import Scenario

__all__ = [
    "BASELINE",
    "Result",
    "Target",
    "exponents",
    "loglog_slope",
    "machine",
    "markdown",
    "targets",
]

BASELINE = "limit-json"
ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Result:
    """One contender on one scenario."""

    scenario: Scenario
    contender: str
    samples: tuple[float, ...]
    complete: bool
    """``False``: the run hit its cap; ``samples`` holds one lower bound."""
    fraction: float
    """Share of the body read (1.0 when complete)."""
    correct: bool | None
    """Outcome equal to the expected one (``None`` when the run was capped)."""
    peak: int | None = None
    """Peak traced memory in bytes (``None``: not measured)."""
    progress_events: int | None = None
    parsed_events: int | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def minimum(self) -> float:
        return min(self.samples)


@attrs.frozen
class Target:
    """One target of issue #7 and whether this run met it."""

    name: str
    met: bool | None
    """``None``: neither shown nor refuted (a capped peer's lower bound falls short)."""
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "MET", False: "MISSED", None: "NOT SHOWN"}[self.met]


def loglog_slope(sizes: Sequence[float], times: Sequence[float]) -> float:
    """Least-squares slope of ``log(time)`` against ``log(size)``."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(t) for t in times]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    den = sum((x - mx) ** 2 for x in xs)
    return round(num / den, 6)


def _by_key(results: Iterable[Result]) -> dict[tuple[str, str], Result]:
    return {(r.scenario.name, r.contender): r for r in results}


def exponents(results: Sequence[Result]) -> dict[tuple[str, str], tuple[float, bool]]:
    """``(dialect, contender) -> (slope, exact)`` of median time against argument size.

    ``exact`` is ``False`` when the largest size was capped: its lower bound
    makes the slope a lower bound too.
    """
    series: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        if r.scenario.kind == "args":
            series.setdefault((r.scenario.dialect, r.contender), []).append(r)
    out: dict[tuple[str, str], tuple[float, bool]] = {}
    for key, rs in series.items():
        rs.sort(key=lambda r: r.scenario.arg_chars)
        if len(rs) < 2:
            continue
        if any(not r.complete for r in rs[:-1]):
            continue  # only the largest may be a lower bound
        sizes = [r.scenario.arg_chars for r in rs]
        out[key] = (loglog_slope(sizes, [r.median for r in rs]), rs[-1].complete)
    return out


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base > 0 else "n/a"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}" if seconds < 10 else f"{seconds * 1000:.0f}"


def _rate(value: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


def _row(r: Result, base: Result) -> str:
    s = r.scenario
    ge = "" if r.complete else "≥"
    med, low = r.median, r.minimum
    events_s = s.events * r.fraction / med
    mb_s = len(s.body) * r.fraction / 1e6 / med
    base_events = s.events / base.median
    base_mb = len(s.body) / 1e6 / base.median
    mem = "—" if r.peak is None else f"{r.peak / 1024:.0f} KiB ({_ratio(r.peak, base.peak or 0)})"
    runs = str(len(r.samples)) if r.complete else f"capped at {r.fraction:.0%} of body"
    check = {True: "", False: " **WRONG RESULT**", None: ""}[r.correct]
    return (
        f"| {r.contender}{check} | {ge}{_ms(med)} ({ge}{_ratio(med, base.median)}) "
        f"| {ge}{_ms(low)} ({ge}{_ratio(low, base.minimum)}) "
        f"| {_rate(events_s)} ({_ratio(events_s, base_events)}) "
        f"| {mb_s:.1f} ({_ratio(mb_s, base_mb)}) | {mem} | {runs} |"
    )


def markdown(results: Sequence[Result], skipped: dict[str, str]) -> str:
    """The tables: one per scenario, then exponents and targets."""
    lines: list[str] = []
    by = _by_key(results)
    order: list[Scenario] = []
    for r in results:
        if r.scenario not in order:
            order.append(r.scenario)
    for s in order:
        base = by.get((s.name, BASELINE))
        if base is None:
            continue
        extra = f", argument {s.arg_chars:,} chars" if s.arg_chars else ""
        lines.append(f"**{s.name}** — {len(s.body) / 1e6:.2f} MB, {s.events:,} SSE events{extra}")
        lines.append("")
        lines.append(
            "| contender | median ms (xlimit) | min ms (xlimit) | chunks/s (xlimit) "
            "| MB/s (xlimit) | peak memory (xlimit) | runs |"
        )
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for r in results:
            if r.scenario == s:
                lines.append(_row(r, base))
        rafrx = by.get((s.name, "rafrx"))
        if rafrx is not None and rafrx.progress_events is not None:
            lines.append("")
            lines.append(
                f"rafrx emitted {rafrx.progress_events:,} ToolCallArgsProgressContent and "
                f"{rafrx.parsed_events:,} ToolCallArgsParsedContent on this stream."
            )
        lines.append("")
    exps = exponents(results)
    if exps:
        lines.append("**Scaling exponent** (log-log slope of median time against argument size)")
        lines.append("")
        lines.append("| contender | " + " | ".join(sorted({d for d, _ in exps})) + " |")
        lines.append("| --- |" + " --- |" * len({d for d, _ in exps}))
        for contender in sorted({c for _, c in exps}):
            cells = []
            for dialect in sorted({d for d, _ in exps}):
                value = exps.get((dialect, contender))
                cells.append(
                    "—" if value is None else ("" if value[1] else "≥") + f"{value[0]:.2f}"
                )
            lines.append(f"| {contender} | " + " | ".join(cells) + " |")
        lines.append("")
    if skipped:
        lines.append("Skipped: " + "; ".join(f"{k}: {v}" for k, v in sorted(skipped.items())))
        lines.append("")
    lines.append("**Targets**")
    lines.append("")
    for t in targets(results):
        lines.append(f"- {t.verdict} — {t.name}: {t.detail}")
    return "\n".join(lines) + "\n"


def targets(results: Sequence[Result]) -> list[Target]:
    """The issue's targets, checked on this run's figures."""
    by = _by_key(results)
    out: list[Target] = []

    worst: list[str] = []
    ok = True
    seen = False
    for r in results:
        if r.contender != "rafrx" or r.scenario.kind not in ("text", "reasoning", "tools"):
            continue
        base = by[(r.scenario.name, BASELINE)]
        ratio = r.median / base.median
        seen = True
        ok &= ratio <= 2.0
        worst.append(f"{r.scenario.name} {ratio:.2f}x")
    if seen:
        out.append(
            Target(
                "rafrx ≤ 2x the stdlib limit (text, reasoning, parallel calls)",
                ok,
                ", ".join(worst),
            )
        )

    pieces: list[str] = []
    verdicts: list[bool | None] = []
    for r in results:
        if r.contender != "openai":
            continue
        mine = by.get((r.scenario.name, "rafrx"))
        if mine is None:
            continue
        factor = r.median / mine.median
        verdicts.append(True if factor >= 20 else (False if r.complete else None))
        pieces.append(f"{r.scenario.name} {'' if r.complete else '≥'}{factor:.1f}x")
    if verdicts:
        verdict = False if False in verdicts else (None if None in verdicts else True)
        out.append(
            Target("rafrx ≥ 20x faster than ChatCompletionStreamState", verdict, ", ".join(pieces))
        )

    exps = exponents(results)
    for dialect in ("openai-chat", "anthropic"):
        value = exps.get((dialect, "rafrx"))
        if value is not None:
            out.append(
                Target(
                    f"rafrx argument-size exponent ≤ 1.1 ({dialect})",
                    value[0] <= 1.1 and value[1],
                    f"{'' if value[1] else '≥'}{value[0]:.2f}",
                )
            )

    for r in results:
        if r.contender != "jiter" or r.scenario.kind != "args":
            continue
        largest = max(
            x.scenario.arg_chars
            for x in results
            if x.scenario.kind == "args" and x.scenario.dialect == r.scenario.dialect
        )
        if r.scenario.arg_chars != largest:
            continue
        mine = by.get((r.scenario.name, "rafrx"))
        if mine is None:
            continue
        factor = r.median / mine.median
        if r.complete:
            met: bool | None = factor >= 50
            detail = f"{factor:.1f}x"
        else:
            projected = _projected(r, results)
            met = True if factor >= 50 else None
            detail = f"≥{factor:.1f}x measured (jiter stopped at {r.fraction:.0%} of the body)"
            if projected is not None:
                detail += (
                    f"; about {projected / mine.median:.0f}x projected from jiter's own "
                    "scaling on the smaller sizes"
                )
                if projected / mine.median < 50:
                    met = False
        out.append(
            Target(
                f"{r.scenario.name}: rafrx ≥ 50x faster than per-delta jiter re-parse",
                met,
                detail,
            )
        )

    for dialect in ("openai-chat", "anthropic"):
        series = sorted(
            (
                r
                for r in results
                if r.contender == "rafrx"
                and r.scenario.kind == "args"
                and r.scenario.dialect == dialect
                and r.peak is not None
            ),
            key=lambda r: r.scenario.arg_chars,
        )
        if len(series) < 2:
            continue
        slope = loglog_slope(
            [r.scenario.arg_chars for r in series], [float(r.peak or 1) for r in series]
        )
        top = series[-1]
        base = by[(top.scenario.name, BASELINE)]
        ratio = (top.peak or 0) / (base.peak or 1)
        out.append(
            Target(
                f"rafrx memory bounded ({dialect}): peak linear in the argument size "
                "(exponent ≤ 1.1) and ≤ 2x the limit loop's, which keeps only the fragments, "
                "the joined text and the parsed value",
                slope <= 1.1 and ratio <= 2.0,
                f"exponent {slope:.2f}; {top.scenario.name} peak "
                f"{(top.peak or 0) / 1e6:.1f} MB = {ratio:.2f}x the limit loop's "
                f"({(top.peak or 0) / top.scenario.arg_chars:.1f} bytes per argument character)",
            )
        )
    return out


def _projected(capped: Result, results: Sequence[Result]) -> float | None:
    """A capped run's full time, extrapolated with its contender's own size exponent.

    The first fraction ``p`` of a size-``S`` stream costs about what a whole
    stream of size ``p*S`` costs, so ``T_full ≈ T / p**k`` with ``k`` the
    exponent measured on the smaller, complete sizes (clamped to 1..2).
    """
    smaller = sorted(
        (
            r
            for r in results
            if r.contender == capped.contender
            and r.scenario.kind == "args"
            and r.scenario.dialect == capped.scenario.dialect
            and r.complete
        ),
        key=lambda r: r.scenario.arg_chars,
    )
    if len(smaller) < 2 or capped.fraction <= 0:
        return None
    k = loglog_slope([r.scenario.arg_chars for r in smaller], [r.median for r in smaller])
    k = min(2.0, max(1.0, k))
    return capped.median / capped.fraction**k


def machine() -> str:
    """The machine, interpreter and package versions, as Markdown lines."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for package in (
        "reactivex",
        "attrs",
        "msgspec",
        "orjson",
        "jiter",
        "openai",
        "anthropic",
        "langchain-core",
    ):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    try:
        one, five, fifteen = os.getloadavg()
        load = f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1/5/15 min)"
    except OSError:
        load = "load average unknown"
    return "\n".join(
        [
            f"- CPU: {cpu}, `nproc` = {os.cpu_count()}; {load} at the end of the run",
            f"- Python {platform.python_version()} ({platform.python_implementation()}), "
            f"{platform.system()} {platform.release()}",
            f"- rafrx at commit {commit or 'unknown'}; " + ", ".join(versions),
        ]
    )
