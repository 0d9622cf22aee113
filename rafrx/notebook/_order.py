"""An assistant message's reasoning, text and tool calls in the order they streamed.

A :class:`~rafrx.ChatMessage` keeps one text and a tuple of calls; where each
piece stood is in its ``provider_data`` when the provider needs the message back
in that order: Anthropic's :data:`~rafrx.messages.TEXT_REF` /
:data:`~rafrx.messages.TOOL_USE_REF` marks among its thinking blocks (text
after a call, interleaved thinking), the Responses API's
:data:`~rafrx.messages.MESSAGE_REF` / :data:`~rafrx.messages.FUNCTION_CALL_REF`
marks among its reasoning items. :func:`message_parts` reads them, so that the
final view shows a call between the words around it, as the live view did.
Without marks (OpenAI chat, which keeps no order) the reasoning comes first,
then the text, then the calls.

Example:
    >>> from rafrx.messages import ANTHROPIC_THINKING, ChatMessage, ToolCall
    >>> marks = ({"type": TEXT_REF, "chars": 5}, {"type": TOOL_USE_REF, "id": "c1"},
    ...          {"type": TEXT_REF, "chars": 6})
    >>> msg = ChatMessage("assistant", "Look.Found.", tool_calls=[ToolCall("c1", "find", {})],
    ...                   provider_data={ANTHROPIC_THINKING: marks})
    >>> [(kind, getattr(value, "id", value)) for kind, value in message_parts(msg)]
    [('text', 'Look.'), ('call', 'c1'), ('text', 'Found.')]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from rafrx.messages import (
    ANTHROPIC_THINKING,
    CUSTOM_TOOL_CALL_REF,
    FUNCTION_CALL_REF,
    MESSAGE_REF,
    OPENAI_REASONING,
    TEXT_REF,
    TOOL_USE_REF,
    ChatMessage,
    ToolCall,
    _block_type,
    _is_rafrx_mark,
)

__all__ = ["Part", "message_parts"]

Part = tuple[str, Any]
"""``("reasoning", str)``, ``("text", str)``, ``("call", ToolCall)`` or ``("block", dict)``
(another block the provider sent, such as a remote tool's approval request)."""

# The marks naming a call of their message, and the member that names it.
_CALL_MARKS = {TOOL_USE_REF: "id", FUNCTION_CALL_REF: "call_id", CUSTOM_TOOL_CALL_REF: "call_id"}


def message_parts(message: ChatMessage) -> list[Part]:
    """The message's reasoning, text pieces, calls and other kept blocks, in stream order.

    The text is cut where its marks say only when they account for all of it
    (a message edited since it streamed: whole, before its first call); the
    reasoning is placed block by block only when the blocks' texts are all of
    it (else it comes first, whole); the calls no mark places come last, in
    their order.
    """
    kept = _kept_blocks(message)
    calls = list(message.tool_calls or ())
    unplaced = _indices_by_id(calls)
    placed: set[int] = set()
    cut = _text_cut(kept, message.content)
    pieces = iter(cut or ())
    reasoning_placed = "".join(_said(block) for block in kept) == (message.reasoning or "")
    parts: list[Part] = []
    if message.reasoning and not reasoning_placed:
        parts.append(("reasoning", message.reasoning))
    for block in kept:
        kind = _block_type(block)
        if kind in (TEXT_REF, MESSAGE_REF):
            piece = next(pieces, "")
            if piece:
                parts.append(("text", piece))
        elif kind in _CALL_MARKS:
            named = block.get(_CALL_MARKS[kind])
            waiting = unplaced.get(named) if isinstance(named, str) else None
            if waiting:
                placed.add(waiting[0])
                parts.append(("call", calls[waiting.popleft()]))
        elif reasoning_placed and (said := _said(block)):
            parts.append(("reasoning", said))
        elif not _is_rafrx_mark(block):
            parts.append(("block", block))
    if cut is None and message.content:  # not placed by marks: before the first call
        first_call = next((i for i, (kind, _) in enumerate(parts) if kind == "call"), len(parts))
        parts.insert(first_call, ("text", message.content))
    parts.extend(("call", call) for i, call in enumerate(calls) if i not in placed)
    return parts


def _indices_by_id(calls: Sequence[ToolCall]) -> dict[str, deque[int]]:
    """Each call id's calls, by their index (a history may hold an id twice)."""
    indices: dict[str, deque[int]] = {}
    for i, call in enumerate(calls):
        indices.setdefault(call.id, deque()).append(i)
    return indices


def _kept_blocks(message: ChatMessage) -> list[Any]:
    """The message's Anthropic and Responses blocks, each provider's in stream order."""
    kept = message.provider_data or {}
    blocks = [*(kept.get(ANTHROPIC_THINKING) or ()), *(kept.get(OPENAI_REASONING) or ())]
    return [b for b in blocks if isinstance(b, Mapping)]


def _text_size(block: Mapping[str, Any]) -> int | None:
    """How many characters of the message's text a text mark stands for."""
    if _block_type(block) == TEXT_REF:
        chars = block.get("chars")
        return chars if type(chars) is int and chars >= 0 else None
    said = block.get("text")
    return len(said) if isinstance(said, str) else 0  # (a message item with no text)


def _text_cut(kept: Sequence[Mapping[str, Any]], text: str) -> list[str] | None:
    """The text's pieces, one per text mark; ``None`` when the marks do not account
    for exactly the whole text (there are none, or the text was edited since)."""
    sizes = [_text_size(b) for b in kept if _block_type(b) in (TEXT_REF, MESSAGE_REF)]
    known = [size for size in sizes if size is not None]
    if not sizes or len(known) < len(sizes) or sum(known) != len(text):
        return None
    pieces, at = [], 0
    for size in known:
        pieces.append(text[at : at + size])
        at += size
    return pieces


def _said(block: Mapping[str, Any]) -> str:
    """The reasoning text a block holds: an Anthropic ``thinking`` block's, a Responses
    ``reasoning`` item's summary and content (as the stream gave them); else ``""``."""
    kind = _block_type(block)
    if kind == "thinking":
        thought = block.get("thinking")
        return thought if isinstance(thought, str) else ""
    if kind == "reasoning":
        parts = [*_listed(block.get("summary")), *_listed(block.get("content"))]
        return "".join(
            p["text"] for p in parts if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def _listed(value: Any) -> Sequence[Any]:
    """``value`` when it is a list (a block kept from the wire may hold anything)."""
    return value if isinstance(value, list | tuple) else ()
