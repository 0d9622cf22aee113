"""Conversation history and per-turn context for an :class:`~rafrx.agent.Agent`.

A :class:`HistoryProvider` loads the conversation so far before a turn and
saves what the turn added after it. The agent marks what it loads
``CHAT_HISTORY`` and what context providers inject ``CONTEXT_PROVIDER``, so a
provider can tell new messages from old ones by their
:class:`~rafrx.MessageSource` alone: :class:`InMemoryHistoryProvider` never
re-saves either.

Example:
    >>> import asyncio
    >>> from rafrx.messages import ChatMessage, MessageSource
    >>> history = InMemoryHistoryProvider()
    >>> turn = [ChatMessage.user("Hi", source=MessageSource.EXTERNAL), ChatMessage.assistant("Hello!")]
    >>> asyncio.run(history.save(turn))
    >>> loaded = asyncio.run(history.load())
    >>> [(m.content, m.source) for m in loaded]
    [('Hi', <MessageSource.CHAT_HISTORY: 'chat_history'>), ('Hello!', <MessageSource.CHAT_HISTORY: 'chat_history'>)]
    >>> asyncio.run(history.save([*loaded, ChatMessage.user("Again", source=MessageSource.EXTERNAL)]))
    >>> [m.content for m in history.messages]
    ['Hi', 'Hello!', 'Again']
"""  # noqa: E501

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from rafrx.messages import ChatMessage, MessageSource, checked_messages

__all__ = ["ContextProvider", "HistoryProvider", "InMemoryHistoryProvider", "is_new"]

_NOT_NEW = frozenset({MessageSource.CHAT_HISTORY, MessageSource.CONTEXT_PROVIDER})

#: What an in-memory history keeps (its error's start for anything else).
_KEPT = "an InMemoryHistoryProvider keeps ChatMessages"


def is_new(message: ChatMessage) -> bool:
    """Whether a turn added ``message`` (it was neither loaded history nor injected context).

    Example:
        >>> is_new(ChatMessage.user("Hi", source=MessageSource.EXTERNAL))
        True
        >>> is_new(ChatMessage.system("Facts: ...", source=MessageSource.CONTEXT_PROVIDER))
        False
    """
    return message.source not in _NOT_NEW


@runtime_checkable
class HistoryProvider(Protocol):
    """Where an agent's conversation lives between turns."""

    async def load(self) -> Sequence[ChatMessage]:
        """The conversation so far, oldest first (the agent marks it ``CHAT_HISTORY``)."""
        ...

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        """Append what a turn added: its ``EXTERNAL`` input, assistant and tool messages.

        Implementations should skip messages marked ``CHAT_HISTORY`` or
        ``CONTEXT_PROVIDER`` (see :func:`is_new`), so saving a whole
        conversation never duplicates what was loaded.
        """
        ...


@runtime_checkable
class ContextProvider(Protocol):
    """Adds messages to each LLM request of a turn (retrieved facts, the date ...).

    The agent marks them ``CONTEXT_PROVIDER``; they are never saved.
    """

    async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        """Messages to inject, given the turn's history and new input."""
        ...


class InMemoryHistoryProvider:
    """A :class:`HistoryProvider` holding the conversation in a list.

    Args:
        messages: A conversation to start from.

    Example:
        >>> import asyncio
        >>> history = InMemoryHistoryProvider([ChatMessage.user("Hi")])
        >>> asyncio.run(history.save([ChatMessage.assistant("Hello!")]))
        >>> [m.content for m in asyncio.run(history.load())]
        ['Hi', 'Hello!']
    """

    def __init__(self, messages: Iterable[ChatMessage] = ()) -> None:
        self._messages: list[ChatMessage] = list(checked_messages(messages, _KEPT))

    @property
    def messages(self) -> tuple[ChatMessage, ...]:
        """Everything saved so far, with the sources it was saved with."""
        return tuple(self._messages)

    async def load(self) -> Sequence[ChatMessage]:
        """The saved conversation, each message marked ``CHAT_HISTORY``."""
        # (copies: what a caller does to a loaded message's blocks never reaches the history)
        return tuple(
            copy.deepcopy(m.with_source(MessageSource.CHAT_HISTORY)) for m in self._messages
        )

    async def save(self, messages: Sequence[ChatMessage]) -> None:
        """Append the messages that are new (see :func:`is_new`); skip the others."""
        # (copies: what a caller does to the saved messages' blocks never reaches the history)
        given = checked_messages(messages, _KEPT)
        self._messages.extend(copy.deepcopy(m) for m in given if is_new(m))

    def clear(self) -> None:
        """Forget the conversation."""
        self._messages.clear()

    def __repr__(self) -> str:
        return f"InMemoryHistoryProvider({len(self._messages)} messages)"
