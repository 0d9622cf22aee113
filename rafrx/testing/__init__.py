"""A real local LLM server for tests, notebooks, demos and benchmarks.

:class:`LLMServer` is an aiohttp server on 127.0.0.1 that speaks OpenAI chat
completions, Anthropic Messages and the OpenAI Responses API, all streaming.
Tell it what to answer: recorded bodies (:class:`Replay`), scripted replies
rendered in each wire format (:class:`Reply` with :class:`ToolCallSpec`), or
faults done for real on the socket (:class:`Fault`: HTTP errors, dropped
connections, stalls, garbage, endless lines, wrong content types). It records
every request (:class:`RecordedRequest`, secrets redacted) and counts
connections, so tests can prove a client closes what it opens. It only
streams: a request without ``"stream": true`` gets HTTP 400.

Example:
    >>> import asyncio
    >>> import aiohttp
    >>> async def main() -> str:
    ...     async with LLMServer() as server, aiohttp.ClientSession() as http:
    ...         server.enqueue(Fault.status(429, retry_after=1))
    ...         url = server.url + "/v1/chat/completions"
    ...         async with http.post(url, json={"stream": True}) as resp:
    ...             return f"{resp.status} retry after {resp.headers['Retry-After']}"
    >>> asyncio.run(main())
    '429 retry after 1'
"""

from rafrx.testing._recorded import REDACTED, RecordedRequest, redact_headers
from rafrx.testing._render import (
    WIRE_FORMATS,
    WireFormat,
    error_body,
    estimate_usage,
    render,
    render_events,
)
from rafrx.testing._responses import (
    DEFAULT_REPLY,
    FINISH_SPELLINGS,
    Body,
    Fault,
    FaultKind,
    Replay,
    Reply,
    ServerResponse,
    ToolCallSpec,
)
from rafrx.testing._serve import FAULT_REPLY
from rafrx.testing._server import LLMServer, Script
from rafrx.testing._thread import ServerThread

__all__ = [
    "DEFAULT_REPLY",
    "FAULT_REPLY",
    "FINISH_SPELLINGS",
    "REDACTED",
    "WIRE_FORMATS",
    "Body",
    "Fault",
    "FaultKind",
    "LLMServer",
    "RecordedRequest",
    "Replay",
    "Reply",
    "Script",
    "ServerResponse",
    "ServerThread",
    "ToolCallSpec",
    "WireFormat",
    "error_body",
    "estimate_usage",
    "redact_headers",
    "render",
    "render_events",
]
