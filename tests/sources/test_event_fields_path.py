"""UpdateDecoder hands the built-in dialects each event as its fields (no ServerSentEvent
built); a subclass of a built-in dialect gets ServerSentEvents through ``feed``. Both
ways give exactly the same updates and errors on every recorded provider stream, whole
and cut into small chunks, and on bodies that fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rafrx.sources import UpdateDecoder
from rafrx.sources.dialects import AnthropicDialect, OpenAIChatDialect, OpenAIResponsesDialect

FIXTURES = Path(__file__).parent.parent / "data" / "fixtures"
_CLASSES = {
    "openai-chat": OpenAIChatDialect,
    "anthropic": AnthropicDialect,
    "openai-responses": OpenAIResponsesDialect,
}


def _by_events(cls: type) -> type:
    return type(f"Events{cls.__name__}", (cls,), {})  # a subclass: the ServerSentEvent path


def _decode(make: Any, body: bytes, size: int) -> list[Any]:
    decoder = UpdateDecoder(make)
    seen: list[Any] = []
    try:
        for start in range(0, len(body), size):
            seen += decoder.feed(body[start : start + size])
            if decoder.done:
                break
        seen += decoder.close()
    except Exception as err:
        seen.append((type(err).__name__, str(err), getattr(err, "raw", None)))
    return seen


_BODIES = [
    (path.parent.name, path)
    for path in sorted(FIXTURES.rglob("*.sse"))
    if path.parent.name in _CLASSES
]


@pytest.mark.parametrize(("dialect", "path"), _BODIES, ids=[p.name for _, p in _BODIES])
@pytest.mark.parametrize("size", [7, 4096, 1 << 30])
def test_the_fields_path_gives_what_the_event_path_gives(
    dialect: str, path: Path, size: int
) -> None:
    body = path.read_bytes()
    cls = _CLASSES[dialect]
    assert _decode(cls, body, size) == _decode(_by_events(cls), body, size)
    assert _decode(cls, body, size) == _decode(dialect, body, size)


@pytest.mark.parametrize("dialect", list(_CLASSES))
@pytest.mark.parametrize(
    "body",
    [
        b'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: {"choices": 1}\n\n',
        b"event: content_block_delta\ndata: {nope\n\n",
        b'event: error\ndata: {"error": {"message": "boom"}}\n\n',
        b'data: {"type": "response.output_text.delta", "delta": "x"}\n\ndata: [1]\n\n',
        b"data: [DONE]\n\ndata: {bad\n\n",
    ],
)
def test_failing_bodies_fail_the_same_both_ways(dialect: str, body: bytes) -> None:
    cls = _CLASSES[dialect]
    for size in (5, 1 << 30):
        assert _decode(cls, body, size) == _decode(_by_events(cls), body, size)
