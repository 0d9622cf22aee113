"""``split_legacy_delta``: flat OpenAI tool-call deltas → Start / Args / End updates."""

from __future__ import annotations

import json
import uuid
from collections.abc import Container, Sequence
from typing import cast

from rafrx.errors import ProtocolError
from rafrx.operators._reducer import reducer_operator
from rafrx.typing import Operator
from rafrx.updates import (
    AgentResponseUpdate,
    Finish,
    ReasoningDelta,
    ToolCallArgs,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Update,
)

__all__ = ["LegacyDeltaSplitter", "new_call_id", "split_legacy_delta", "unique_call_id"]


def new_call_id() -> str:
    """A fresh tool-call id for providers that send none (unique across turns)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def unique_call_id(call_id: str, taken: Container[str], next_suffix: dict[str, int]) -> str:
    """``call_id`` of another call (a provider giving parallel calls one id) made unique
    among ``taken``: ``<id>_2``, ``<id>_3`` … ``next_suffix`` keeps the suffix each reused
    id tries next, so the work stays linear however many calls reuse one id.

    Example:
        >>> taken, next_suffix = {"c", "c_3"}, {}
        >>> unique_call_id("c", taken, next_suffix), next_suffix
        ('c_2', {'c': 3})
        >>> unique_call_id("c", taken, next_suffix)  # (c_3 is taken)
        'c_4'
    """
    n = next_suffix.get(call_id, 2)
    while f"{call_id}_{n}" in taken:
        n += 1
    next_suffix[call_id] = n + 1
    return f"{call_id}_{n}"


class _Slot:
    """The call currently open at one wire index."""

    __slots__ = (
        "extras",
        "first_args",
        "held",
        "id",
        "name",
        "named",
        "started",
        "wire_id",
    )

    def __init__(self, call_id: str | None) -> None:
        self.id = call_id  # the call's id in the updates: unique within the response
        self.wire_id = call_id  # the provider's (None: ours), which another index may repeat
        self.name: str | None = None
        self.started = False
        self.held: list[str] = []
        self.extras: list[ReasoningDelta] = []  # its extra blocks that came before it started
        self.named = 0  # deltas that carried the name
        self.first_args = ""  # the arguments of the first of them

    def is_new_call(self, delta: ToolCallDelta) -> bool:
        """Whether ``delta`` starts another call at this index.

        It does when it brings a different id (one the provider sent: an id
        that comes after ours was generated continues the call) with a name or
        before the call has one, a different name (a call's name never
        changes), or the same name again with arguments that start a new
        object after a complete one (a provider that sends every call whole at
        index 0 without ids: Ollama, Gemini adapters calling one function
        twice). A nameless delta of a named call that brings arguments under
        another id goes on with it, as its index says and openai-python merges
        (Poolside's); one that brings the id alone announces the next call.
        """
        new_id = bool(delta.id and self.wire_id and delta.id != self.wire_id)
        return bool(
            (new_id and (delta.name or not self.started or not delta.arguments_delta))
            or (
                delta.name
                and self.name is not None
                and (delta.name != self.name or self._restarts(delta.arguments_delta))
            )
        )

    def _restarts(self, arguments: str) -> bool:
        # Only after the call's first named delta: a provider that repeats the name on
        # every fragment is never parsed again and again (linear), nor split.
        if self.named != 1 or not arguments.lstrip().startswith("{"):
            return False
        whole = self.first_args
        if not whole.rstrip().endswith("}"):
            return False
        try:
            json.loads(whole)
        except (ValueError, RecursionError):
            return False
        return True


def _check_named(index: int, slot: _Slot) -> None:
    """A call that sent arguments but never a name cannot be run: say so, lose nothing."""
    if not slot.started and slot.held:
        raise ProtocolError(
            f"tool call at index {index} (id {slot.id!r}) sent arguments "
            f"{''.join(slot.held)[:200]!r} but never a name"
        )


def _named(extra: ReasoningDelta, call_id: str) -> ReasoningDelta:
    """``extra``, a block naming its call by wire index, naming it by ``call_id``."""
    block = extra.provider_data or {}
    named = {k: v for k, v in block.items() if k != "index"} | {"call_id": call_id}
    return ReasoningDelta(extra.delta, provider_data=named)


def _named_extras(slot: _Slot, call_id: str) -> list[ReasoningDelta]:
    """The extra blocks ``slot`` held, now naming their call (and no longer held)."""
    extras = [_named(extra, call_id) for extra in slot.extras]
    slot.extras.clear()
    return extras


class LegacyDeltaSplitter:
    """The reducer behind :func:`split_legacy_delta` (one per subscription).

    Example:
        >>> s = LegacyDeltaSplitter()
        >>> s.step(ToolCallDelta(0, id="a", name="f", arguments_delta='{"x"'))
        [ToolCallStart(id='a', name='f'), ToolCallArgs(id='a', args_delta='{"x"')]
        >>> s.step(ToolCallDelta(0, arguments_delta=": 1}"))
        [ToolCallArgs(id='a', args_delta=': 1}')]
        >>> s.finish()
        [ToolCallEnd(id='a')]
    """

    __slots__ = ("_ids", "_open", "_slots", "_suffixes")

    def __init__(self) -> None:
        self._slots: dict[int, _Slot] = {}
        self._open: list[_Slot] = []  # started calls, in start order
        self._ids: set[str] = set()  # the ids of the calls started in this response
        self._suffixes: dict[str, int] = {}  # a reused id → the next suffix to try (unique_call_id)

    def step(self, update: Update) -> Sequence[AgentResponseUpdate]:
        if type(update) is ToolCallDelta:
            return self._delta(update)
        if type(update) is Finish:
            out = self._end_all()
            out.append(update)
            return out
        if type(update) is ReasoningDelta and update.provider_data is not None:
            named = self.named_extra(update)
            return () if named is None else (named,)
        return (cast("AgentResponseUpdate", update),)  # (every variant is final: one of them)

    def named_extra(self, update: ReasoningDelta) -> ReasoningDelta | None:
        """``update``, a call's extra block that names it by wire index (Gemini's
        signature on a call that came with no id) naming it by id instead; ``None``
        while that call has not started (the block then comes right after its
        start, under the id it starts with).

        Example:
            >>> s = LegacyDeltaSplitter()
            >>> [start] = s.step(ToolCallDelta(0, name="f"))
            >>> block = {"type": "tool_call_extra", "index": 0, "extra_content": {}}
            >>> s.named_extra(ReasoningDelta("", provider_data=block)).provider_data["call_id"] == start.id
            True
            >>> s.named_extra(ReasoningDelta("", provider_data=block | {"index": 1})) is None
            True
            >>> s.step(ToolCallDelta(1, id="c2", name="g"))[-1].provider_data["call_id"]
            'c2'
        """  # noqa: E501
        block = update.provider_data
        if type(block) is not dict or block.get("type") != "tool_call_extra":
            return update
        index = block.get("index")
        if type(index) is not int or index < 0:
            return update
        slot = self._slots.get(index)
        if slot is None:  # (sent before the call itself: the call it will name)
            slot = self._slots[index] = _Slot(None)
        named = ReasoningDelta(update.delta, provider_data=block)
        if not slot.started:
            slot.extras.append(named)
            return None
        return _named(named, slot.id or "")

    def continued_call(self, delta: ToolCallDelta) -> str | None:
        """The id of the started call that ``delta`` merely continues, else None.

        For such a delta :meth:`step` returns just ``ToolCallArgs(id,
        delta.arguments_delta)`` (nothing when that is empty) and changes no
        state, so a caller may build that itself (``convert()``'s fast path).
        """
        slot = self._slots.get(delta.index)
        if slot is None or not slot.started:
            return None
        if delta.name or (delta.id and delta.id != slot.wire_id and not delta.arguments_delta):
            return None  # maybe a new call: step() decides
        return slot.id

    def opened_call(self, delta: ToolCallDelta) -> tuple[str, str] | None:
        """The id and name of the call ``delta`` opens, when it names a call at an
        index that has none and brings no arguments; else None, changing nothing.

        For such a delta :meth:`step` returns just ``ToolCallStart(id, name)``,
        and this does what it does, without building it (``convert()``'s fast
        path).

        Example:
            >>> s = LegacyDeltaSplitter()
            >>> s.opened_call(ToolCallDelta(0, id="a", name="f"))
            ('a', 'f')
            >>> s.opened_call(ToolCallDelta(0, id="b", name="g")) is None  # (step() decides)
            True
        """
        name = delta.name
        index = delta.index
        if not name or delta.arguments_delta or index in self._slots or index < 0:
            return None
        slot = self._slots[index] = _Slot(delta.id or None)
        slot.name = name
        slot.named = 1  # (its first arguments: none)
        return self._start(slot), name

    def end_calls(self) -> list[str]:
        """End the calls this splitter started: the ids of the ``ToolCallEnd`` updates
        that :meth:`step` emits first for a ``Finish``, in start order.

        :meth:`step` then emits only the rest for the ``Finish`` (``convert()``'s
        fast path ends the calls itself).

        Example:
            >>> from rafrx.response import FinishReason
            >>> s = LegacyDeltaSplitter()
            >>> _ = s.step(ToolCallDelta(0, id="a", name="f"))
            >>> s.end_calls(), s.step(Finish(FinishReason.TOOL_CALLS))
            (['a'], [Finish(finish_reason=<FinishReason.TOOL_CALLS: 'tool_calls'>, usage=None)])

        Raises:
            ProtocolError: A call sent arguments but never a name (as :meth:`step` raises).
        """
        for index, slot in self._slots.items():
            _check_named(index, slot)
        if not self._open:
            return []
        ended = [slot.id or "" for slot in self._open]
        self._open.clear()
        return ended

    def finish(self) -> list[AgentResponseUpdate]:
        return self._end_all()

    def fail(self, error: Exception) -> Sequence[AgentResponseUpdate]:
        return ()

    def _delta(self, delta: ToolCallDelta) -> list[AgentResponseUpdate]:
        slot = self._slots.get(delta.index)
        if slot is None or slot.is_new_call(delta):
            if slot is not None:
                _check_named(delta.index, slot)
            elif delta.index < 0:  # checked here, once per call, not per delta
                raise ProtocolError(f"tool call index must be >= 0, got {delta.index}")
            slot = self._slots[delta.index] = _Slot(delta.id or None)
        elif delta.id and not slot.id:
            slot.id = slot.wire_id = delta.id
        if delta.name:
            slot.named += 1
            if slot.named == 1:
                slot.first_args = delta.arguments_delta
        out: list[AgentResponseUpdate] = []
        if delta.name and slot.name is None:
            slot.name = delta.name
        if slot.started:
            if delta.arguments_delta:
                out.append(ToolCallArgs(slot.id or "", delta.arguments_delta))
            return out
        if delta.arguments_delta:
            slot.held.append(delta.arguments_delta)
        if slot.name is not None:
            call_id = self._start(slot)
            out.append(ToolCallStart(call_id, slot.name))
            if slot.held:
                out.append(ToolCallArgs(call_id, "".join(slot.held)))
                slot.held.clear()
            if slot.extras:
                out += _named_extras(slot, call_id)
        return out

    def _start(self, slot: _Slot) -> str:
        """Start the call at ``slot``, now named: its id, unique within the response."""
        slot.started = True
        call_id = slot.id
        if not call_id:
            call_id = new_call_id()
        elif call_id in self._ids:
            # Another call by that id (DeepSeek, GLM and Kimi may give parallel calls
            # one id): one id each, for each to be answered apart.
            call_id = unique_call_id(call_id, self._ids, self._suffixes)
        slot.id = call_id
        self._ids.add(call_id)
        self._open.append(slot)
        return call_id

    def _end_all(self) -> list[AgentResponseUpdate]:
        if not (self._slots or self._open):  # (at the finish after a Finish: nothing open)
            return []
        out: list[AgentResponseUpdate] = [ToolCallEnd(call_id) for call_id in self.end_calls()]
        for slot in self._slots.values():  # (extras of a call that never came: kept all the same)
            if slot.extras:
                out += _named_extras(slot, slot.id or new_call_id())
        self._slots.clear()
        self._ids.clear()
        self._suffixes.clear()
        return out


def split_legacy_delta() -> Operator[Update, AgentResponseUpdate]:
    """See :func:`rafrx.operators.split_legacy_delta`."""
    return reducer_operator(LegacyDeltaSplitter)
