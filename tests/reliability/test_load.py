"""Load and soak: 1,000 concurrent streams on one loop, many sequential calls.

The figures (streams/s, updates/s, peak memory per stream, memory growth)
are printed; run with ``-s`` to see them::

    python -m pytest tests/reliability/test_load.py -s
    RAFRX_SOAK_CALLS=10000 python -m pytest tests/reliability/test_load.py -s -k soak

``RAFRX_LOAD_STREAMS`` (default 1,000) and ``RAFRX_SOAK_CALLS`` (default
1,000 in CI; the 10,000-call soak takes one to two minutes) size them. Client
and server share the process (and the loop), so memory figures count both.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from reactivex import operators as rxops

from rafrx import ChatMessage, collect_agent_response
from rafrx import operators as ops
from rafrx.response import AgentResponse
from rafrx.sources.clients import LLMClient, OpenAIChatClient
from rafrx.testing import LLMServer, RecordedRequest, Reply
from tests.reliability._support import count_fds, settle, wait_for

STREAMS = int(os.environ.get("RAFRX_LOAD_STREAMS", "1000"))
SOAK_CALLS = int(os.environ.get("RAFRX_SOAK_CALLS", "1000"))
WORDS = " ".join(f"w{i}" for i in range(40))  # 20 text deltas of 8 characters
KiB = 1024


def report(name: str, **figures: float) -> None:
    """Print the figures of a run (shown with ``pytest -s``)."""
    shown = ", ".join(f"{key}={value:,.1f}" for key, value in figures.items())
    print(f"\n[reliability] {name}: {shown}", file=sys.stderr)


def echo(request: RecordedRequest) -> Reply:
    """Answer ``<the user message>: <WORDS>``, so each stream's text is its own."""
    return Reply(text=f"{request.messages[-1]['content']}: {WORDS}", chunk_size=8)


@pytest.fixture(autouse=True)
def enough_file_descriptors() -> None:
    """Each stream holds two sockets (client and server end) in this process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * STREAMS + 512
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert soft == resource.RLIM_INFINITY or soft >= want, f"ulimit -n must allow {want}"


@pytest_asyncio.fixture
async def server(no_task_leak: None) -> AsyncIterator[LLMServer]:
    async with LLMServer() as llm:
        yield llm


async def collect(client: LLMClient, text: str, counter: list[int]) -> AgentResponse:
    def count(_: object) -> None:
        counter[0] += 1

    source = client.stream([ChatMessage.user(text)]).pipe(rxops.do_action(count), ops.convert())
    return await collect_agent_response(source)


@pytest.mark.asyncio
async def test_a_thousand_concurrent_streams_aggregate_correctly(server: LLMServer) -> None:
    server.script(echo)
    await settle()
    fds = count_fds()
    updates = [0]
    async with OpenAIChatClient(server.url, "sk-load") as client:
        await collect(client, "warm-up", [0])
        start = time.perf_counter()
        responses = await asyncio.gather(
            *(collect(client, f"stream {i}", updates) for i in range(STREAMS))
        )
        elapsed = time.perf_counter() - start
        assert server.connections_opened >= STREAMS  # they did run side by side
    for i, response in enumerate(responses):
        assert response.text == f"stream {i}: {WORDS}"
        assert response.finish_reason == "stop"
        assert response.usage is not None
        assert response.usage.completion_tokens > 0
        assert not response.interrupted
    assert len({r.id for r in responses}) == STREAMS
    assert updates[0] >= STREAMS * 20
    await server.wait_connections_closed(timeout=30)
    await wait_for(lambda: count_fds() <= fds, timeout=10)
    report(
        f"{STREAMS} concurrent streams",
        seconds=elapsed,
        streams_per_s=STREAMS / elapsed,
        updates_per_s=updates[0] / elapsed,
        updates_per_stream=updates[0] / STREAMS,
    )


@pytest.mark.asyncio
async def test_peak_memory_per_concurrent_stream_is_bounded(server: LLMServer) -> None:
    count = min(STREAMS, 200)
    server.script(echo)
    async with OpenAIChatClient(server.url, "sk-load") as client:
        await collect(client, "warm-up", [0])
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            responses = await asyncio.gather(
                *(collect(client, f"stream {i}", [0]) for i in range(count))
            )
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    assert [r.text for r in responses] == [f"stream {i}: {WORDS}" for i in range(count)]
    per_stream = peak / count
    report(f"{count} concurrent streams, client and server", peak_KiB_per_stream=per_stream / KiB)
    assert per_stream < 256 * KiB


@pytest.mark.asyncio
async def test_soak_sequential_calls_do_not_grow(server: LLMServer) -> None:
    """Tasks, descriptors and live Python objects are counted over all the
    calls; memory is traced over the second half and sampled (after a
    collection) ten times. Interpreter caches grow in a few steps of some
    tens of KiB during the first thousands of calls, then stay flat (about
    125 KiB in all over 8,000 calls): the bound allows for one such step."""
    server.default = Reply(text=WORDS, chunk_size=8)
    traced_from = SOAK_CALLS // 2
    checkpoint = max(1, (SOAK_CALLS - traced_from) // 10)
    samples: list[int] = []
    updates = [0]
    async with OpenAIChatClient(server.url, "sk-soak") as client:
        for _ in range(20):  # warm up: session, connection pool
            await collect(client, "warm", [0])
        server.requests.clear()
        await settle()
        tasks, fds, objects = len(asyncio.all_tasks()), count_fds(), len(gc.get_objects())
        start = time.perf_counter()
        try:
            for n in range(1, SOAK_CALLS + 1):
                response = await collect(client, "soak", updates)
                assert response.text == WORDS
                server.requests.clear()  # the test server's own record
                if n == traced_from:
                    gc.collect()
                    tracemalloc.start()
                    samples.append(tracemalloc.get_traced_memory()[0])
                elif n > traced_from and (n - traced_from) % checkpoint == 0:
                    gc.collect()
                    samples.append(tracemalloc.get_traced_memory()[0])
            elapsed = time.perf_counter() - start
        finally:
            tracemalloc.stop()
        await settle()
        assert len(asyncio.all_tasks()) <= tasks
        assert count_fds() <= fds
        assert server.open_connections == 1  # one keep-alive connection, reused
        extra_objects = len(gc.get_objects()) - objects
    traced = SOAK_CALLS - traced_from
    growth = samples[-1] - samples[0]
    report(
        f"soak of {SOAK_CALLS} sequential calls",
        seconds=elapsed,
        calls_per_s=SOAK_CALLS / elapsed,
        updates_per_s=updates[0] / elapsed,
        traced_calls=traced,
        memory_growth_KiB=growth / KiB,
        bytes_per_call=growth / traced,
        extra_live_objects=extra_objects,
    )
    assert extra_objects < 200  # no object is kept per call
    assert growth < 64 * traced + 96 * KiB
