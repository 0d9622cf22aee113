"""Provider stream dialects: decoded SSE events → :data:`~rafrx.updates.AgentResponseUpdate`.

A dialect is a sans-IO state machine for one stream: :meth:`~Dialect.feed`
it each :class:`~rafrx.sse.ServerSentEvent`, stop reading once
:attr:`~Dialect.done` is true (bytes after the terminal marker are ignored),
then call :meth:`~Dialect.close`, which returns what was held back (the
``Finish``) or raises :class:`~rafrx.errors.IncompleteStream` when the stream
ended without its terminal marker. In-band errors raise
:class:`~rafrx.errors.ProviderError`; data that is not the expected JSON
raises :class:`~rafrx.errors.MalformedEvent`. Unknown event types and fields
are ignored.

:data:`DIALECTS` maps each name to a factory; add an entry to register a
dialect of your own.

Example:
    >>> from rafrx.sse import ServerSentEvent
    >>> dialect = get_dialect("openai-chat")
    >>> dialect.feed(ServerSentEvent(data='{"choices": [{"delta": {"content": "Hi"}}]}'))
    [TextDelta(delta='Hi')]
    >>> get_dialect("nope")
    Traceback (most recent call last):
    ...
    ValueError: unknown dialect 'nope'; known dialects: 'anthropic', 'openai-chat', \
'openai-responses'
"""

from __future__ import annotations

from collections.abc import Callable

from rafrx.sources.dialects._common import Dialect
from rafrx.sources.dialects.anthropic import AnthropicDialect, anthropic_usage
from rafrx.sources.dialects.openai_chat import OpenAIChatDialect, chat_usage
from rafrx.sources.dialects.openai_responses import OpenAIResponsesDialect, responses_usage

__all__ = [
    "DIALECTS",
    "AnthropicDialect",
    "Dialect",
    "DialectFactory",
    "OpenAIChatDialect",
    "OpenAIResponsesDialect",
    "anthropic_usage",
    "chat_usage",
    "get_dialect",
    "responses_usage",
]

DialectFactory = Callable[[], Dialect]
"""Anything that makes a fresh :class:`Dialect` (a dialect class, typically)."""

DIALECTS: dict[str, DialectFactory] = {
    "openai-chat": OpenAIChatDialect,
    "anthropic": AnthropicDialect,
    "openai-responses": OpenAIResponsesDialect,
}
"""The dialects by name. OpenAI-compatible servers (DeepSeek, Groq, OpenRouter,
Ollama, Gemini, Mistral, vLLM, llama.cpp, xAI, Azure ...) use ``"openai-chat"``."""


def get_dialect(name: str) -> Dialect:
    """A fresh dialect (state for one stream) by name.

    Raises:
        ValueError: ``name`` is not in :data:`DIALECTS`; the message lists them.
    """
    check_dialect_name(name)
    return DIALECTS[name]()


def check_dialect_name(name: str) -> None:
    """Raise ``ValueError`` (listing the known names) unless ``name`` is in :data:`DIALECTS`.

    Example:
        >>> check_dialect_name("anthropic")
        >>> check_dialect_name("openai")
        Traceback (most recent call last):
        ...
        ValueError: unknown dialect 'openai'; known dialects: 'anthropic', 'openai-chat', 'openai-responses'
    """  # noqa: E501
    if name not in DIALECTS:
        known = ", ".join(repr(n) for n in sorted(DIALECTS))
        raise ValueError(f"unknown dialect {name!r}; known dialects: {known}")
