"""Benchmark rafrx's SSE decoder against a naive ``split(b"\\n")`` loop.

Run ``python bench/bench_sse.py [--mb 5] [--chunk 1024] [--repeat 5]``. The body
is a generated OpenAI-chat-like stream (``data: {...}\\n\\n`` per token,
``data: [DONE]`` at the end) fed in fixed-size chunks. Both decoders produce
the list of event data strings; the figures are MB/s of body (best of
``--repeat`` runs).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from rafrx.sse import ServerSentEvent, SSEDecoder

WORDS = ["Hello", " world", ",", " the", " quick", " brown", " fox", " jumps", " é", " 日本"]


def make_body(target_bytes: int) -> bytes:
    """Build an OpenAI-chat-like SSE body of about ``target_bytes``."""
    parts: list[bytes] = []
    size = 0
    i = 0
    while size < target_bytes:
        chunk = {
            "id": "chatcmpl-9xYzAbCdEfGhIjKlMnOpQrStUvWx",
            "object": "chat.completion.chunk",
            "created": 1718000000 + i // 50,
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_0ba0d124f1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": WORDS[i % len(WORDS)]},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
        line = b"data: " + json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode()
        line += b"\n\n"
        parts.append(line)
        size += len(line)
        i += 1
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def split(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


def naive(chunks: list[bytes]) -> list[str]:
    """What a hand-written client typically does."""
    out: list[str] = []
    buf = b""
    for chunk in chunks:
        buf += chunk
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            if line.startswith(b"data: "):
                out.append(line[6:].decode())
    return out


def naive_events(chunks: list[bytes]) -> list[str]:
    """The naive loop, but building the same ServerSentEvent objects as rafrx."""
    out: list[str] = []
    buf = b""
    for chunk in chunks:
        buf += chunk
        lines = buf.split(b"\n")
        buf = lines.pop()
        for line in lines:
            if line.startswith(b"data: "):
                event = ServerSentEvent(data=line[6:].decode())
                out.append(event.data)
    return out


def openai_sse(chunks: list[bytes]) -> list[str]:
    """openai-python's decoder (``openai._streaming.SSEDecoder``), if installed."""
    from openai._streaming import SSEDecoder as OpenAIDecoder

    return [event.data for event in OpenAIDecoder().iter_bytes(iter(chunks))]


def rafrx_sse(chunks: list[bytes]) -> list[str]:
    decoder = SSEDecoder()
    out: list[str] = []
    for chunk in chunks:
        for event in decoder.feed(chunk):
            out.append(event.data)
    decoder.close()
    return out


def best_times(
    fns: list[Callable[[list[bytes]], list[str]]], chunks: list[bytes], repeat: int
) -> list[float]:
    """Best wall time of each function; runs are interleaved so that load from
    other processes hits both alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn(chunks)
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="body size in MB")
    parser.add_argument("--chunk", type=int, default=1024, help="chunk size in bytes")
    parser.add_argument("--repeat", type=int, default=20, help="runs per decoder")
    args = parser.parse_args()

    body = make_body(int(args.mb * 1_000_000))
    chunks = split(body, args.chunk)
    candidates: dict[str, Callable[[list[bytes]], list[str]]] = {
        "naive split loop": naive,
        "naive loop + ServerSentEvent": naive_events,
        "rafrx SSEDecoder": rafrx_sse,
    }
    try:
        import openai  # noqa: F401
    except ImportError:
        pass
    else:
        candidates["openai-python SSEDecoder"] = openai_sse
    reference = naive(chunks)
    for name, fn in candidates.items():
        assert fn(chunks) == reference, f"{name} disagrees"
    mb = len(body) / 1_000_000
    events = body.count(b"\n\n")
    print(f"body: {mb:.2f} MB, {events} events, {len(chunks)} chunks of {args.chunk} B")
    times = best_times(list(candidates.values()), chunks, args.repeat)
    for name, seconds in zip(candidates, times, strict=True):
        print(
            f"{name:<30} {mb / seconds:7.1f} MB/s  {seconds * 1000:7.1f} ms"
            f"  {seconds / times[0]:5.2f}x the naive loop's time"
        )


if __name__ == "__main__":
    main()
