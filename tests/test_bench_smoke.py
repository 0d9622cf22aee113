"""The benchmark suite works on tiny sizes: generator, contenders, runner, report.

Not a timing test: it checks that the generated bodies aggregate to what the
generator says, that rafrx's result equals the limit loop's on the same
chunks, and that the runner, the cap and the report do what they claim.
"""

from __future__ import annotations

import argparse
import doctest
import gc
import importlib
import json

import pytest

from bench import report
from bench.concurrency import CLIENTS, Recorder, Stats, _Server, measure, throughput_body
from bench.concurrency import report as concurrency_report
from bench.contenders import CONTENDERS, applicable
from bench.generate import Scenario, build_scenarios, python_source, split_chunks, split_events
from bench.limit import limit_anthropic, limit_openai_chat
from bench.measure import peak_memory, warm_up
from bench.outcome import Outcome
from bench.rafrx_pipeline import count_parse_events, run_rafrx
from bench.run import measure_scenario

TINY = build_scenarios(scale=0.02, arg_sizes=(2_000, 6_000), seed=3)
NAMES = [s.name for s in TINY]


def _limit(dialect: str, chunks: list[bytes]) -> Outcome:
    return (limit_openai_chat if dialect == "openai-chat" else limit_anthropic)(chunks)


def test_every_scenario_is_there() -> None:
    kinds = ("text", "reasoning", "tools4-seq", "tools4-inter", "tools16-seq", "tools16-inter")
    for prefix in ("chat", "anthropic"):
        expected = [f"{prefix}/{k}" for k in kinds]
        expected += [f"{prefix}/write_file-2k", f"{prefix}/write_file-6k"]
        assert [n for n in NAMES if n.startswith(prefix + "/")] == expected


def test_generator_is_seeded() -> None:
    again = build_scenarios(scale=0.02, arg_sizes=(2_000, 6_000), seed=3)
    other = build_scenarios(scale=0.02, arg_sizes=(2_000, 6_000), seed=4)
    assert [s.body for s in again] == [s.body for s in TINY]
    assert all(a.body != b.body for a, b in zip(other, TINY, strict=True))


def test_python_source_has_the_size_and_needs_escaping() -> None:
    source = python_source(5_000, seed=9)
    assert len(source) == 5_000
    assert '"' in source
    assert "\\" in source
    assert "\n" in source
    assert not source.isascii()


def test_split_chunks_keeps_the_bytes_in_socket_sized_pieces() -> None:
    body = TINY[0].body
    chunks = split_chunks(body, seed=1, lo=1024, hi=4096)
    assert b"".join(chunks) == body
    assert all(1024 <= len(c) <= 4096 for c in chunks[:-1])
    assert len(chunks[-1]) <= 4096


@pytest.mark.parametrize("scenario", TINY, ids=NAMES)
def test_bodies_are_valid_sse_with_the_expected_result(scenario: Scenario) -> None:
    events = [e for e in scenario.body.split(b"\n\n") if e]
    assert len(events) == scenario.events
    for event in events:
        data = event.split(b"data: ", 1)[1]
        if data != b"[DONE]":
            json.loads(data)
    assert _limit(scenario.dialect, [scenario.body]) == Outcome.of(scenario.expected)


@pytest.mark.parametrize("scenario", TINY, ids=NAMES)
def test_rafrx_equals_the_limit_loop(scenario: Scenario) -> None:
    chunks = split_chunks(scenario.body, seed=2, lo=64, hi=512)
    limit = _limit(scenario.dialect, chunks)
    assert run_rafrx(chunks, scenario.dialect) == limit
    assert limit == Outcome.of(scenario.expected)


def test_the_tool_scenarios_have_calls_and_arguments() -> None:
    by_name = {s.name: s for s in TINY}
    assert len(by_name["chat/tools16-inter"].expected.tool_calls) == 16
    assert len(by_name["anthropic/tools4-seq"].expected.tool_calls) == 4
    (call,) = by_name["chat/write_file-6k"].expected.tool_calls
    assert call[1] == "write_file"
    assert len(call[2]["content"]) == 6_000
    assert by_name["anthropic/reasoning"].expected.reasoning
    assert by_name["chat/reasoning"].expected.text


def test_rafrx_emits_progress_and_parsed_events() -> None:
    scenario = next(s for s in TINY if s.name == "anthropic/write_file-6k")
    progress, parsed = count_parse_events(split_chunks(scenario.body, seed=0), scenario.dialect)
    assert parsed == 2  # path and content
    assert progress > 6_000 / 8  # the content grows in 3-8 character deltas


def test_the_runner_measures_and_checks_results() -> None:
    scenario = next(s for s in TINY if s.name == "chat/tools4-inter")
    contenders = [c for c in applicable(scenario) if c.key in ("limit-json", "rafrx")]
    results = measure_scenario(scenario, contenders, repeat=3, budget=5.0, cap=30.0)
    assert [r.contender for r in results] == ["limit-json", "rafrx"]
    for r in results:
        assert r.correct is True
        assert r.complete
        assert 3 <= len(r.samples) <= 50
        assert r.peak is not None
        assert r.peak > 0
    text = report.markdown(results, {"jiter": "not installed"})
    assert "**chat/tools4-inter**" in text
    assert "| rafrx |" in text
    assert "| limit-json | " in text
    assert "Skipped: jiter: not installed" in text
    assert "rafrx ≤ 2x the stdlib limit" in text


def test_the_runner_reads_one_event_per_chunk_on_request() -> None:
    scenario = next(s for s in TINY if s.name == "anthropic/tools4-seq")
    chunks = split_events(scenario.body)
    assert b"".join(chunks) == scenario.body
    assert all(chunk.endswith(b"\n\n") and chunk.count(b"\n\n") == 1 for chunk in chunks)
    contenders = [c for c in applicable(scenario) if c.key in ("limit-json", "rafrx")]
    results = measure_scenario(scenario, contenders, repeat=1, memory=False, per_event=True)
    assert [r.correct for r in results] == [True, True]


def test_a_wrong_result_is_flagged() -> None:
    scenario = next(s for s in TINY if s.name == "chat/text")
    liar = CONTENDERS[0].__class__(
        "liar", "returns nothing", lambda chunks, dialect: Outcome("", "", ()), lambda s: True
    )
    base = CONTENDERS[0]
    results = measure_scenario(scenario, [base, liar], repeat=1, memory=False)
    assert [r.correct for r in results] == [True, False]
    assert "**WRONG RESULT**" in report.markdown(results, {})


def test_a_slow_run_is_capped_as_a_lower_bound() -> None:
    scenario = next(s for s in TINY if s.name == "chat/text")
    chunks = split_chunks(scenario.body, seed=0, lo=64, hi=128)

    def slow(chunks: list[bytes], dialect: str) -> Outcome:
        import time

        for _ in chunks:
            time.sleep(0.002)
        return Outcome("", "", ())

    first = warm_up(slow, chunks, "openai-chat", cap=0.02)
    assert not first.complete
    assert first.outcome is None
    assert 0 < first.fraction < 1
    assert first.seconds >= 0.02


def test_rafrx_capped_through_the_observable_is_recognised() -> None:
    scenario = next(s for s in TINY if s.name == "chat/text")
    chunks = split_chunks(scenario.body, seed=0, lo=64, hi=128)
    first = warm_up(lambda c, d: run_rafrx(c, d), chunks, "openai-chat", cap=0.0)
    assert not first.complete


def test_peak_memory_counts_what_the_run_allocates() -> None:
    def allocate(chunks: list[bytes], dialect: str) -> Outcome:
        block = bytearray(2_000_000)
        return Outcome(str(len(block)), "", ())

    assert peak_memory(allocate, [], "openai-chat") >= 2_000_000


def test_loglog_slope_and_exponents() -> None:
    assert report.loglog_slope([1, 10, 100], [3, 300, 30_000]) == pytest.approx(2.0)
    args = [s for s in TINY if s.kind == "args" and s.dialect == "anthropic"]
    results = [report.Result(s, "x", (s.arg_chars * 1e-6,), True, 1.0, True) for s in args] + [
        report.Result(s, "limit-json", (1.0,), True, 1.0, True) for s in args
    ]
    exps = report.exponents(results)
    assert exps[("anthropic", "x")] == (pytest.approx(1.0), True)
    assert exps[("anthropic", "limit-json")] == (pytest.approx(0.0), True)


def test_machine_description_names_cpu_and_python() -> None:
    text = report.machine()
    assert "nproc" in text
    assert "Python 3." in text


@pytest.mark.parametrize(
    "module",
    [
        "bench.generate",
        "bench.limit",
        "bench.outcome",
        "bench.report",
        "bench.measure",
        "bench.rafrx_pipeline",
        "bench.contenders",
        "bench.cache",
        "bench.bench_init",
        "bench.json_decoders",
        "bench.idle_timer",
        "bench.stages",
        "bench.ab",
    ],
)
def test_docstring_examples(module: str) -> None:
    failures, tried = doctest.testmod(importlib.import_module(module))
    assert tried > 0
    assert failures == 0


def test_concurrency_clients_read_every_chunk() -> None:
    events = 30
    server = _Server("--serve-replay", "--events", str(events))
    try:
        for runner in CLIENTS.values():
            stats: Stats = measure(runner, server.url, 4, stamped=False)
            assert stats.failed == 0, stats.errors
            assert stats.chunks == 4 * events
    finally:
        server.close()
    assert len(throughput_body(events)) > 0


def test_concurrency_clients_count_their_cpu_time() -> None:
    server = _Server("--serve-replay", "--events", "10")
    try:
        stats = measure(CLIENTS["rafrx"], server.url, 2, stamped=False)
    finally:
        server.close()
    assert stats.cpu > 0
    assert 0 <= stats.gc_time < stats.cpu + 0.1


def test_concurrency_measure_times_garbage_collections() -> None:
    async def collecting(url: str, streams: int, record: Recorder, stats: Stats) -> None:
        garbage = []
        for _ in range(20_000):  # cycles, so that the collector has work
            node: list[object] = []
            node.append(node)
            garbage.append(node)
        del garbage
        gc.collect()

    callbacks = list(gc.callbacks)
    stats = measure(collecting, "http://unused", 1, stamped=False)
    assert stats.gc_time > 0
    assert gc.callbacks == callbacks  # its timer is removed again


def test_concurrency_report_gives_cpu_per_chunk_as_a_ratio_to_the_limit() -> None:
    limit = Stats(streams=1, chunks=1000, first=0.0, last=1.0, cpu=0.005, gc_time=0.0004)
    rafrx = Stats(streams=1, chunks=1000, first=0.0, last=2.0, cpu=0.0075, gc_time=0.0021)
    args = argparse.Namespace(streams=1, events=1000, paced_events=1, interval=1.0, rounds=3)
    text = concurrency_report({"limit": limit, "rafrx": rafrx}, {}, args)
    assert "| limit | 1/1 | 1,000 | 1,000 (1.00x) | — | 5.0 (1.00x) | 0.4 |" in text
    assert "| rafrx | 1/1 | 1,000 | 500 (0.50x) | — | 7.5 (1.50x) | 2.1 |" in text
    assert "best of 3 interleaved rounds" in text


def test_concurrency_latency_uses_the_server_stamp() -> None:
    server = _Server("--serve-stamped", "--paced-events", "5", "--interval", "0.01")
    try:
        for runner in CLIENTS.values():
            stats = measure(runner, server.url, 3, stamped=True)
            assert stats.failed == 0, stats.errors
            assert len(stats.latencies) == 15
            assert len(stats.steady) == 9  # chunks 2, 3 and 4 of each stream
            assert all(0 <= x < 5 for x in stats.latencies)
    finally:
        server.close()


def test_target_verdicts_follow_the_figures() -> None:
    by_name = {s.name: s for s in TINY}
    text, tools = by_name["chat/text"], by_name["chat/tools4-seq"]

    def result(s: Scenario, key: str, t: float, complete: bool = True) -> report.Result:
        return report.Result(s, key, (t,), complete, 1.0 if complete else 0.5, True)

    results = [
        result(text, "limit-json", 1.0),
        result(text, "rafrx", 1.5),
        result(text, "openai", 40.0),
        result(tools, "limit-json", 1.0),
        result(tools, "rafrx", 2.5),
        result(tools, "openai", 30.0, complete=False),
    ]
    verdicts = {t.name: t for t in report.targets(results)}
    limit = verdicts["rafrx ≤ 2x the stdlib limit (text, reasoning, parallel calls)"]
    assert limit.verdict == "MISSED"
    assert "chat/tools4-seq 2.50x" in limit.detail
    openai = verdicts["rafrx ≥ 20x faster than ChatCompletionStreamState"]
    assert openai.verdict == "NOT SHOWN"  # 12x is only a lower bound
    results[4] = result(tools, "rafrx", 1.2)
    verdicts = {t.name: t for t in report.targets(results)}
    assert verdicts[limit.name].verdict == "MET"
    assert verdicts[openai.name].verdict == "MET"


def test_the_command_line_prints_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.run import main

    code = main(
        ["--quick", "--scenarios", "anthropic/tools4-seq", "--only", "rafrx", "--repeat", "2"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "**anthropic/tools4-seq**" in out
    assert "| rafrx |" in out
    assert "command: `python -m bench.run --quick" in out
    assert "nproc" in out
