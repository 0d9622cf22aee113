"""Many concurrent streams on one event loop: rafrx's client beside a limit loop over aiohttp.

Usage (from the repository root)::

    python -m bench.concurrency                 # 1000 streams, both modes
    python -m bench.concurrency --streams 200   # lighter

The servers run in a child process (their own interpreter and core), the
clients all on this process's one asyncio loop. Two measurements:

* **throughput**: ``rafrx.testing.LLMServer`` replays the same generated
  OpenAI chat body (``--events`` text deltas) to every stream as fast as it
  can, in 2 KB writes. Reported: total chunks (SSE events) per second and MB/s
  over the window from the first content seen to the last, and this
  process's CPU time per chunk (the client's own cost, whatever share of the
  cores the server gets) and the part of it spent in CPython's cyclic garbage
  collector (timed through ``gc.callbacks``). The contenders take turns for ``--rounds`` rounds;
  each is reported by its fastest round, the one least disturbed by other load.
* **latency**: a stamping server sends ``--paced-events`` text deltas per
  stream, one every ``--interval`` seconds (20 every 0.5 s by default: 2000
  chunks/s offered over 1000 streams; streams start at random offsets),
  each delta's text being the server's ``time.time()`` at the moment it
  writes it. The subscriber subtracts it from its own clock when it sees the
  content: the latency from the server's write to the subscriber's receipt,
  p50/p99 over every chunk of every stream, and over the chunks after each
  stream's first two (*steady*: past the burst of connections opening).
  (LLMServer replays fixed bytes, so it cannot stamp a write time; hence
  this small second server.)

Contenders: ``rafrx`` is ``OpenAIChatClient.stream(...).pipe(convert())``
with a subscriber that reads each ``TextContent``; ``limit`` is an aiohttp
POST whose body is read with ``iter_any()``, split into lines and
``json.loads``-ed, the content handed to the same recording function.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import attrs

from bench.generate import build_scenarios
from bench.report import machine

__all__ = ["Stats", "main", "run_limit", "run_rafrx"]

_MODEL = "gpt-4o-2024-08-06"
_HEAD = (
    'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1727346168,'
    f'"model":"{_MODEL}","system_fingerprint":"fp_5050236cbd","choices":[{{"index":0,'
)
_DELTA_BEFORE = _HEAD + '"delta":{"content":"'
_DELTA_AFTER = '"},"logprobs":null,"finish_reason":null}]}\n\n'
_TAIL = (
    _HEAD + '"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n'
    'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1727346168,'
    f'"model":"{_MODEL}","choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":9,'
    '"total_tokens":14}}\n\ndata: [DONE]\n\n'
)


def throughput_body(events: int, seed: int = 0) -> bytes:
    """The OpenAI chat text body every throughput stream gets."""
    scenario = build_scenarios(
        scale=events / 3000, arg_sizes=(), seed=seed, dialects=("openai-chat",)
    )
    return scenario[0].body


# ------------------------------------------------------------------ servers


async def _until_stdin_closes() -> None:
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def _serve_replay(events: int, seed: int) -> None:
    from rafrx.testing import LLMServer, Replay

    body = throughput_body(events, seed)
    async with LLMServer(default=Replay(body, chunk_size=2048)) as server:
        print(server.port, flush=True)
        await _until_stdin_closes()


async def _serve_stamped(events: int, interval: float) -> None:
    from aiohttp import web

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(random.random() * interval)
        for i in range(events):
            stamp = f"{i} {time.time():.6f}"
            await response.write(f"{_DELTA_BEFORE}{stamp}{_DELTA_AFTER}".encode())
            await asyncio.sleep(interval)
        await response.write(_TAIL.encode())
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = runner.addresses[0][1]
    print(port, flush=True)
    try:
        await _until_stdin_closes()
    finally:
        await runner.cleanup()


class _Server:
    """A server child process; its first stdout line is the port."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.concurrency", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


# ------------------------------------------------------------------ clients


@attrs.define
class Stats:
    """What one contender's streams saw."""

    streams: int = 0
    failed: int = 0
    chunks: int = 0
    body_bytes: int = 0
    first: float = float("inf")
    last: float = 0.0
    cpu: float = 0.0
    """CPU seconds this (client) process spent on the run, connecting included."""
    gc_time: float = 0.0
    """Seconds of that run spent in CPython's cyclic garbage collector."""
    latencies: list[float] = attrs.field(factory=list)
    steady: list[float] = attrs.field(factory=list)
    """Latencies of every stream's third chunk on (past the connection burst)."""
    errors: list[str] = attrs.field(factory=list)

    def record(self, text: str, stamped: bool) -> None:
        now = time.time()
        self.chunks += 1
        self.first = min(self.first, now)
        self.last = now
        if stamped:
            index, stamp = text.split()
            latency = now - float(stamp)
            self.latencies.append(latency)
            if int(index) >= 2:
                self.steady.append(latency)


Recorder = Callable[[str], None]


async def run_limit(url: str, streams: int, record: Recorder, stats: Stats) -> None:
    """The limit loop over aiohttp: ``iter_any()``, split lines, ``json.loads``."""
    payload = {"model": _MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> None:
            async with session.post(url + "/v1/chat/completions", json=payload) as response:
                buf = b""
                async for chunk in response.content.iter_any():
                    buf += chunk
                    if b"\n" not in chunk:
                        continue
                    lines = buf.split(b"\n")
                    buf = lines.pop()
                    for line in lines:
                        if not line.startswith(b"data: "):
                            continue
                        if line == b"data: [DONE]":
                            return
                        for choice in json.loads(line[6:])["choices"]:
                            content = choice["delta"].get("content")
                            if content:
                                record(content)

        await _gather(one, streams, stats)


async def run_rafrx(url: str, streams: int, record: Recorder, stats: Stats) -> None:
    """rafrx: ``OpenAIChatClient.stream(...).pipe(convert())``, ``TextContent`` recorded."""
    from rafrx import ChatMessage, TextContent, convert
    from rafrx.response import AgentResponseResult
    from rafrx.sources.clients import OpenAIChatClient

    loop = asyncio.get_running_loop()
    async with OpenAIChatClient(url, model=_MODEL) as client:

        async def one() -> None:
            done: asyncio.Future[None] = loop.create_future()

            def on_next(result: AgentResponseResult) -> None:
                for content in result.contents:
                    if type(content) is TextContent:
                        record(content.text)

            def on_error(error: Exception) -> None:
                if not done.done():
                    done.set_exception(error)

            def on_completed() -> None:
                if not done.done():
                    done.set_result(None)

            updates = client.stream([ChatMessage.user("hi")])
            subscription = updates.pipe(convert()).subscribe(on_next, on_error, on_completed)
            try:
                await done
            finally:
                subscription.dispose()

        await _gather(one, streams, stats)


async def _gather(one: Callable[[], Awaitable[None]], streams: int, stats: Stats) -> None:
    results = await asyncio.gather(*(one() for _ in range(streams)), return_exceptions=True)
    for result in results:
        stats.streams += 1
        if isinstance(result, BaseException):
            stats.failed += 1
            if len(stats.errors) < 3:
                stats.errors.append(f"{type(result).__name__}: {result}")


Runner = Callable[[str, int, Recorder, Stats], Awaitable[None]]
CLIENTS: dict[str, Runner] = {"limit": run_limit, "rafrx": run_rafrx}


def measure(runner: Runner, url: str, streams: int, stamped: bool) -> Stats:
    """Run ``streams`` concurrent streams of one contender on a fresh event loop."""
    stats = Stats()

    def record(text: str) -> None:
        stats.record(text, stamped)

    collector = _CollectorTimer()
    gc.callbacks.append(collector)
    cpu = time.process_time()
    try:
        asyncio.run(runner(url, streams, record, stats))
    finally:
        stats.cpu = time.process_time() - cpu
        gc.callbacks.remove(collector)
    stats.gc_time = collector.seconds
    return stats


class _CollectorTimer:
    """A ``gc.callbacks`` entry adding up the time spent in collections."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _raise_fd_limit() -> None:
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover
        pass


def report(throughput: dict[str, Stats], latency: dict[str, Stats], args: Any) -> str:
    """The Markdown table of both measurements."""
    lines = [
        f"{args.streams} concurrent streams on one asyncio loop "
        f"(Python {sys.version.split()[0]}, {os.cpu_count()} CPUs); servers in a child process.",
        "",
        "| client | streams ok | chunks | chunks/s (xlimit) | MB/s | client CPU µs/chunk (xlimit) "
        "| of it GC µs/chunk | latency p50 ms | latency p99 ms | steady p50 / p99 ms "
        "| paced chunks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = throughput.get("limit")
    base_rate = base.chunks / (base.last - base.first) if base and base.last > base.first else 0.0
    base_cpu = base.cpu / base.chunks if base and base.chunks else 0.0
    for key in CLIENTS:
        t = throughput.get(key)
        lat = latency.get(key)
        cells = [key]
        if t is not None:
            window = max(t.last - t.first, 1e-9)
            rate = t.chunks / window
            ratio = f" ({rate / base_rate:.2f}x)" if base_rate else ""
            ok = t.streams - t.failed
            cells += [f"{ok}/{t.streams}", f"{t.chunks:,}", f"{rate:,.0f}{ratio}"]
            mb = t.body_bytes / window / 1e6 if t.body_bytes else float("nan")
            cells.append("—" if mb != mb else f"{mb:.1f}")
            cpu = t.cpu / t.chunks * 1e6 if t.chunks else float("nan")
            cpu_ratio = f" ({cpu / 1e6 / base_cpu:.2f}x)" if base_cpu and t.chunks else ""
            cells.append("—" if cpu != cpu else f"{cpu:.1f}{cpu_ratio}")
            cells.append(f"{t.gc_time / t.chunks * 1e6:.1f}" if t.chunks else "—")
        else:
            cells += ["—"] * 6
        if lat is not None and lat.latencies:
            cells += [
                f"{_percentile(lat.latencies, 0.5) * 1000:.2f}",
                f"{_percentile(lat.latencies, 0.99) * 1000:.2f}",
                f"{_percentile(lat.steady, 0.5) * 1000:.2f} / "
                f"{_percentile(lat.steady, 0.99) * 1000:.2f}",
                f"{len(lat.latencies):,} ({lat.failed} failed streams)",
            ]
        else:
            cells += ["—"] * 4
        lines.append("| " + " | ".join(cells) + " |")
    errors = [
        f"{k}: {e}" for group in (throughput, latency) for k, s in group.items() for e in s.errors
    ]
    if errors:
        lines += ["", "Errors: " + "; ".join(errors)]
    lines += [
        "",
        f"Throughput: {args.events} text deltas per stream from LLMServer, 2 KB writes, "
        f"best of {args.rounds} interleaved rounds. "
        f"Latency: {args.paced_events} deltas per stream, one every {args.interval * 1000:.0f} ms "
        f"({args.streams / args.interval:,.0f} chunks/s offered in total); *steady* leaves out "
        "each stream's first two chunks, which meet the burst of 1000 connections opening. "
        "*GC*: the client's time in CPython's cyclic garbage collector (`gc.callbacks`).",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--events", type=int, default=200, help="deltas per throughput stream")
    parser.add_argument("--paced-events", type=int, default=20, help="deltas per paced stream")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between paced deltas")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds, best kept")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=sorted(CLIENTS), help="one client only")
    parser.add_argument("--update-readme", action="store_true", help="rewrite bench/README.md")
    parser.add_argument("--serve-replay", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-stamped", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _raise_fd_limit()
    if args.serve_replay:
        asyncio.run(_serve_replay(args.events, args.seed))
        return 0
    if args.serve_stamped:
        asyncio.run(_serve_stamped(args.paced_events, args.interval))
        return 0

    clients = [args.only] if args.only else list(CLIENTS)
    throughput: dict[str, Stats] = {}
    latency: dict[str, Stats] = {}
    server = _Server("--serve-replay", "--events", str(args.events), "--seed", str(args.seed))
    body_size = len(throughput_body(args.events, args.seed))
    try:
        for round_ in range(args.rounds):
            for key in clients:
                print(f"throughput: {key}, round {round_ + 1}", file=sys.stderr)
                stats = measure(CLIENTS[key], server.url, args.streams, stamped=False)
                stats.body_bytes = body_size * (stats.streams - stats.failed)
                best = throughput.get(key)
                if best is None or stats.last - stats.first < best.last - best.first:
                    throughput[key] = stats
    finally:
        server.close()
    server = _Server(
        "--serve-stamped",
        "--paced-events",
        str(args.paced_events),
        "--interval",
        str(args.interval),
    )
    try:
        for key in clients:
            print(f"latency: {key}", file=sys.stderr)
            latency[key] = measure(CLIENTS[key], server.url, args.streams, stamped=True)
    finally:
        server.close()
    text = report(throughput, latency, args)
    command = "python -m bench.concurrency " + " ".join(sys.argv[1:] if argv is None else argv)
    text += f"\n\nCommand: `{command.strip()}`\n\n{machine()}"
    print(text)
    if args.update_readme:
        from bench.run import update_readme

        update_readme(text, "concurrency")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
