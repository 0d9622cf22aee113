"""Which dialect an SSE event is of, by its name or its JSON ``type`` (not by any text in
it): for :func:`rafrx.recorder.guess_dialect`, and for the decoder to say that a body it
could not read is of another format.

Example:
    >>> from rafrx.sse import ServerSentEvent
    >>> dialect_of(ServerSentEvent(event="message_start", data="{}"))
    'anthropic'
    >>> dialect_of(ServerSentEvent(data='{"choices": []}'))
    'openai-chat'
"""

from __future__ import annotations

import json
from typing import Any, Final

from rafrx.sse import ServerSentEvent

__all__ = ["dialect_of"]

_ANTHROPIC_EVENTS: Final = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "ping", "message_delta"}
)


def dialect_of(event: ServerSentEvent) -> str | None:
    """The dialect one event belongs to, if it tells."""
    kind: Any = None if event.event == "message" else event.event
    if kind is None:
        try:
            data = json.loads(event.data)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        if "choices" in data or data.get("object") == "chat.completion.chunk":
            return "openai-chat"
        kind = data.get("type")
    if isinstance(kind, str) and kind.startswith("response."):
        return "openai-responses"
    if kind in _ANTHROPIC_EVENTS:
        return "anthropic"
    return None
