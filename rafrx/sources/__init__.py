"""Sources: streamed LLM responses → ``Observable[AgentResponseUpdate]``.

* :func:`from_sse` reads a response body (bytes, or sync / async byte chunks)
  with a provider :mod:`dialect <rafrx.sources.dialects>`;
* :class:`UpdateDecoder` is the same pipeline as a sans-IO object, for
  transports that drive the reading themselves;
* :data:`DIALECTS` / :func:`get_dialect`: ``"openai-chat"``, ``"anthropic"``,
  ``"openai-responses"``.

Example:
    >>> from rafrx import operators as ops
    >>> body = (b'event: message_start\\ndata: {"type": "message_start", "message": '
    ...         b'{"id": "msg_1", "model": "claude", "usage": {"input_tokens": 3}}}\\n\\n'
    ...         b'event: content_block_delta\\ndata: {"type": "content_block_delta", "index": 0,'
    ...         b' "delta": {"type": "text_delta", "text": "Hi"}}\\n\\n'
    ...         b'event: message_delta\\ndata: {"type": "message_delta", '
    ...         b'"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}\\n\\n'
    ...         b'event: message_stop\\ndata: {"type": "message_stop"}\\n\\n')
    >>> response = from_sse(body, "anthropic").pipe(ops.convert(), ops.aggregate()).run()
    >>> response.text, response.id, response.usage and response.usage.total_tokens
    ('Hi', 'msg_1', 4)
"""

from __future__ import annotations

from rafrx.sources._decoder import UpdateDecoder
from rafrx.sources._from_sse import from_sse
from rafrx.sources.dialects import (
    DIALECTS,
    AnthropicDialect,
    Dialect,
    DialectFactory,
    OpenAIChatDialect,
    OpenAIResponsesDialect,
    get_dialect,
)

__all__ = [
    "DIALECTS",
    "AnthropicDialect",
    "Dialect",
    "DialectFactory",
    "OpenAIChatDialect",
    "OpenAIResponsesDialect",
    "UpdateDecoder",
    "from_sse",
    "get_dialect",
]
