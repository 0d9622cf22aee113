"""Tests for rafrx.history: the providers and the MessageSource de-duplication."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rafrx.history import ContextProvider, HistoryProvider, InMemoryHistoryProvider, is_new
from rafrx.messages import ChatMessage, MessageSource, ToolCall

EXTERNAL = MessageSource.EXTERNAL
HISTORY = MessageSource.CHAT_HISTORY
CONTEXT = MessageSource.CONTEXT_PROVIDER


def turn() -> list[ChatMessage]:
    return [
        ChatMessage.user("Weather in Oslo?", source=EXTERNAL),
        ChatMessage.assistant_with_tools("", [ToolCall("c1", "weather", {"city": "Oslo"})]),
        ChatMessage.tool("rain", "c1"),
        ChatMessage.assistant("It rains in Oslo."),
    ]


@pytest.mark.asyncio
async def test_save_then_load_marks_everything_chat_history() -> None:
    history = InMemoryHistoryProvider()
    await history.save(turn())
    loaded = await history.load()
    assert loaded == tuple(m.with_source(HISTORY) for m in turn())
    assert history.messages == tuple(turn())  # stored with the sources they came with


@pytest.mark.asyncio
async def test_loaded_history_and_context_are_never_saved_again() -> None:
    history = InMemoryHistoryProvider()
    await history.save(turn())
    loaded = await history.load()
    context = ChatMessage.system("Today is Monday.", source=CONTEXT)
    second = [ChatMessage.user("And tomorrow?", source=EXTERNAL), ChatMessage.assistant("Sun.")]
    await history.save([context, *loaded, *second])
    assert history.messages == (*turn(), *second)
    assert len(await history.load()) == 6


@pytest.mark.asyncio
async def test_saving_the_same_whole_conversation_twice_adds_only_the_new_part() -> None:
    history = InMemoryHistoryProvider()
    await history.save(turn())
    for _ in range(3):
        await history.save([*await history.load()])
    assert history.messages == tuple(turn())


@pytest.mark.asyncio
async def test_initial_messages_and_clear() -> None:
    history = InMemoryHistoryProvider([ChatMessage.user("hi", source=EXTERNAL)])
    assert [m.content for m in await history.load()] == ["hi"]
    assert repr(history) == "InMemoryHistoryProvider(1 messages)"
    history.clear()
    assert await history.load() == ()


def test_is_new_by_source() -> None:
    assert is_new(ChatMessage.user("x", source=EXTERNAL))
    assert is_new(ChatMessage.tool("r", "c1"))  # TOOL_RESULT
    assert is_new(ChatMessage.assistant("a"))  # no source: produced by the turn
    assert not is_new(ChatMessage.user("x", source=HISTORY))
    assert not is_new(ChatMessage.system("facts", source=CONTEXT))


def test_protocols_are_structural() -> None:
    class Facts:
        async def provide(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
            return [ChatMessage.system(f"{len(messages)} messages so far")]

    assert isinstance(InMemoryHistoryProvider(), HistoryProvider)
    assert isinstance(Facts(), ContextProvider)
    assert not isinstance(Facts(), HistoryProvider)
