"""``flush_tool_calls``: one :class:`ToolCallingContent` per ended call.

A call cut short becomes one :class:`ToolCallIncompleteContent` instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from rafrx._fragments import COMPACT_AT, compact, joined
from rafrx.content import (
    Content,
    ErrorContent,
    ResponseMetadata,
    ToolCallArgsContent,
    ToolCallEndContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
)
from rafrx.events import FinishEvent
from rafrx.json_stream import partial_json
from rafrx.operators._inputs import not_a_result
from rafrx.operators._reducer import reducer_operator
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.typing import Operator

__all__ = ["KeptCall", "ToolCallFlusher", "flush_tool_calls", "parse_arguments"]


def parse_arguments(raw: str) -> tuple[Any, str | None]:
    """Strictly parse a call's arguments: ``""`` → ``{}``; invalid → ``(None, error)``.

    Example:
        >>> parse_arguments(""), parse_arguments('{"a": 1}')
        (({}, None), ({'a': 1}, None))
        >>> parse_arguments('{"a": ')[1]
        'invalid JSON arguments: Expecting value: line 1 column 7 (char 6)'
    """
    if not raw or raw.isspace():
        return {}, None
    try:
        return json.loads(raw), None
    except ValueError as exc:
        return None, f"invalid JSON arguments: {exc}"
    except RecursionError:
        return None, "invalid JSON arguments: nested too deeply"


Flushed = ToolCallingContent | ToolCallIncompleteContent
"""What a flush makes of a call: one to run, or one cut short."""

FAILED_FIRST = "never run: the stream failed before the response was complete"
"""Why a call whose arguments ended never runs when its stream fails before it is flushed
(its :class:`ToolCallIncompleteContent` says whether they are ``whole``)."""


class KeptCall:
    """A started call's name and argument fragments, until it is flushed.

    Fragments go to ``args``; every :data:`~rafrx._fragments.COMPACT_AT` of
    them, :meth:`compact` joins them into one block.
    """

    __slots__ = ("args", "blocks", "call_id", "cut", "ended", "meta", "name")

    def __init__(self, call_id: str, name: str, meta: ResponseMetadata) -> None:
        self.call_id = call_id
        self.name = name
        self.meta = meta
        self.args: list[str] = []
        self.blocks: list[str] = []
        self.ended = False
        self.cut: bool | None = None  # did its LLM call finish with LENGTH? (None: not yet)

    def compact(self) -> None:
        """Join the fragments in ``args`` into one block."""
        compact(self.args, self.blocks)

    def raw(self) -> str:
        """The whole argument text so far, which then replaces the fragments (freeing them)."""
        raw = joined(self.blocks, self.args)
        self.args.clear()
        self.blocks[:] = (raw,)
        return raw

    def calling(self) -> Flushed:
        """The call, ready to run; or cut short: it has not ended, or ``cut`` explains
        why its arguments do not parse."""
        raw = self.raw()
        if not self.ended:
            return self.incomplete(raw)
        arguments, error = parse_arguments(raw)
        if error is not None and self.cut:
            return self.incomplete(raw)
        return ToolCallingContent(self.call_id, self.name, arguments, raw, error, meta=self.meta)

    def unrun(self) -> ToolCallIncompleteContent:
        """The call as a failing stream leaves it, never to run: ``whole`` when its
        arguments ended and are what the stream's completion would have flushed to
        run (they parse; or, invalid, came in an LLM call that finished short of its
        token limit: the model's mistake, not a cut), else cut short."""
        if not self.ended:
            return self.incomplete()
        raw = self.raw()
        arguments, error = parse_arguments(raw)
        if error is not None and self.cut is not False:  # a token limit's cut, or may be
            return self.incomplete(raw)
        preview = arguments if error is None else _preview(raw)
        return ToolCallIncompleteContent(
            self.call_id, self.name, raw, preview, None, FAILED_FIRST, whole=True, meta=self.meta
        )

    def incomplete(self, raw: str | None = None) -> ToolCallIncompleteContent:
        """The call, cut short (by its token limit, or by the end of its stream)."""
        if raw is None:
            raw = self.raw()
        preview = _preview(raw)
        if self.cut:
            return ToolCallIncompleteContent(
                self.call_id, self.name, raw, preview, FinishReason.LENGTH, meta=self.meta
            )
        if self.ended:  # its arguments are whole: the response is what failed
            return ToolCallIncompleteContent(
                self.call_id, self.name, raw, preview, None, FAILED_FIRST, meta=self.meta
            )
        return ToolCallIncompleteContent(self.call_id, self.name, raw, preview, meta=self.meta)


def _preview(raw: str) -> Any:
    """What the arguments ``raw`` were on their way to; None when nothing can be read."""
    try:
        return partial_json(raw)
    except ValueError:  # (nothing to show yet, or not the start of JSON)
        return None


_LIFECYCLE = frozenset(
    {
        ToolCallStartContent,
        ToolCallArgsContent,
        ToolCallEndContent,
        ToolCallingContent,
        ToolCallIncompleteContent,
        ErrorContent,
    }
)


class ToolCallFlusher:
    """The reducer behind :func:`flush_tool_calls`.

    A call flushed upstream already (``flush_tool_calls`` applied twice, as
    after ``convert()``) is flushed once: its upstream ``ToolCallingContent``
    (or ``ToolCallIncompleteContent``) stands for the one this flusher would
    add (eager or not, whichever comes first), so no tool runs twice.

    A call cut short becomes a :class:`ToolCallIncompleteContent`, never a
    call to run: one that has not ended when its stream completes or fails,
    and one whose invalid arguments came in an LLM call that finished with
    ``LENGTH`` (the token limit cut them; OpenAI's chat API still ends the
    call). Eagerly, a call whose arguments do not parse waits for its LLM
    call's finish to tell which it is. A call whose arguments ended but that
    a failing stream had not flushed yet never runs either: its
    ``ToolCallIncompleteContent`` is ``whole`` when the arguments are (see
    :meth:`KeptCall.unrun`).
    """

    __slots__ = ("_calls", "_deferred", "_eager", "_flushed", "_id", "_model", "_started")

    def __init__(self, eager: bool = False) -> None:
        self._eager = eager
        self._calls: dict[str, KeptCall] = {}  # by id: the latest call to start with it
        self._started: list[KeptCall] = []  # every call not flushed yet, in start order
        self._deferred: list[KeptCall] = []  # eager: ended, invalid, waiting for the finish
        self._flushed: dict[str, int] = {}  # eager flushes by id not yet met upstream
        self._id: str | None = None
        self._model: str | None = None

    def kept_call(self, call_id: str) -> KeptCall | None:
        """Where :meth:`arguments` keeps the fragments of an open call (None: not kept)."""
        pending = self._calls.get(call_id)
        return None if pending is None or pending.ended else pending

    def start(self, content: ToolCallStartContent) -> None:
        """Keep the call ``content`` starts (what :meth:`step` does with it)."""
        # An id may come back in the next LLM call: the ended call stays in _started.
        call = self._calls[content.call_id] = KeptCall(content.call_id, content.name, content.meta)
        if not self._eager:
            self._started.append(call)

    def end(self, call_id: str) -> Flushed | None:
        """Mark a kept call's arguments complete (what :meth:`step` does at its end).

        Returns:
            Eagerly, the call flushed now; None when it waits for its LLM call's
            finish (invalid arguments: cut short, or the model's mistake?), when
            flushing is lazy, or when the call is not kept.
        """
        pending = self._calls.get(call_id)
        if pending is None or pending.ended:
            return None
        pending.ended = True
        if not self._eager:
            return None
        del self._calls[call_id]
        calling = pending.calling()
        if isinstance(calling, ToolCallingContent) and calling.error is not None:
            self._deferred.append(pending)  # cut short, or just invalid?
            return None
        return self._eagerly(calling)

    def arguments(self, content: ToolCallArgsContent) -> None:
        """Keep an argument fragment (what :meth:`step` does with one).

        Fragments of a call that has ended are ignored: its arguments are complete.
        """
        pending = self._calls.get(content.call_id)
        if pending is not None and not pending.ended:
            args = pending.args
            args.append(content.args_delta)
            if len(args) >= COMPACT_AT:
                pending.compact()

    def step(self, result: AgentResponseResult) -> Sequence[AgentResponseResult]:
        try:
            contents = result.contents
        except AttributeError:
            raise not_a_result(result, "flush_tool_calls()") from None
        self._id, self._model = result.id, result.model  # the flushed results carry them
        flushed: list[Content] = []
        repeated: list[Content] = []
        failed = False
        for content in contents:
            if type(content) not in _LIFECYCLE:
                continue
            if isinstance(content, ToolCallArgsContent):
                self.arguments(content)
            elif isinstance(content, ToolCallStartContent):
                self.start(content)
            elif isinstance(content, ToolCallEndContent):
                calling = self.end(content.call_id)
                if calling is not None:
                    flushed.append(calling)
            elif isinstance(content, ErrorContent):
                failed = True
            elif isinstance(content, Flushed) and self._flushed_upstream(content):
                repeated.append(content)
        if result.finish_reason is not None or result.events:
            flushed += self._finished(result)
        out: tuple[AgentResponseResult, ...] = (result,)
        if repeated:
            dropped = {id(c) for c in repeated}  # (by identity: equal contents may differ)
            result = attrs.evolve(
                result, contents=[c for c in result.contents if id(c) not in dropped]
            )
            empty = not (result.contents or result.events or result.finish_reason)
            out = () if empty else (result,)
        if failed:  # what the stream had not flushed goes before the error, which stays last
            flushed += self._unflushed()
            if flushed:
                return (AgentResponseResult(self._id, self._model, None, flushed), *out)
        elif flushed:
            return (*out, AgentResponseResult(self._id, self._model, None, flushed))
        return out

    def _eagerly(self, content: Flushed) -> Flushed:
        """Note an eager flush of ``content``'s call (see :meth:`_flushed_upstream`)."""
        call_id = content.call_id
        self._flushed[call_id] = self._flushed.get(call_id, 0) + 1
        return content

    def _finished(self, result: AgentResponseResult) -> list[Content]:
        """At an LLM call's finish: mark what a token limit cut; flush the deferred calls."""
        reason = result.finish_reason
        if reason is None:
            finish = next((e for e in result.events if isinstance(e, FinishEvent)), None)
            if finish is None:
                return []
            reason = finish.finish_reason
        length = reason is FinishReason.LENGTH
        for pending in (*self._calls.values(), *self._started, *self._deferred):
            if pending.cut is None:  # (a call of an earlier LLM call has its own finish)
                pending.cut = length
        deferred, self._deferred = self._deferred, []
        flushed: list[Content] = [self._eagerly(pending.calling()) for pending in deferred]
        if self._eager:  # a call still open now never ends (its id may come back next call)
            open_calls = [p for p in self._calls.values() if not p.ended]
            for pending in open_calls:
                del self._calls[pending.call_id]
            flushed += [self._eagerly(pending.incomplete()) for pending in open_calls]
        return flushed

    def _unflushed(self) -> list[Content]:
        """Every call not flushed yet, never to run (a stream failing: see
        :meth:`KeptCall.unrun`); then none is kept.

        In start order; eagerly, the calls whose invalid arguments were waiting
        for the finish come first.
        """
        if self._eager:
            kept = [*self._deferred, *(p for p in self._calls.values() if not p.ended)]
        else:
            kept = self._started
        cut: list[Content] = [p.unrun() for p in kept]
        self._forget()
        return cut

    def _flushed_upstream(self, content: Flushed) -> bool:
        """Note that a flusher upstream flushed ``content``'s call; whether this one already had.

        The upstream ``ToolCallingContent`` or ``ToolCallIncompleteContent``
        then stands for this flusher's own: a call still kept is forgotten
        (``False``: pass it on); one this flusher flushed eagerly makes it a
        repeat (``True``: drop it).
        """
        call_id = content.call_id
        cut = isinstance(content, ToolCallIncompleteContent)
        for kept in (self._started, self._deferred):
            for pending in kept:
                if pending.call_id == call_id and (pending.ended or cut):
                    kept.remove(pending)
                    if self._calls.get(call_id) is pending:
                        del self._calls[call_id]
                    return False
        latest = self._calls.get(call_id)
        if latest is not None and (latest.ended or cut):
            del self._calls[call_id]  # (eager: not in _started)
            return False
        count = self._flushed.get(call_id, 0)
        if not count:
            return False
        if count == 1:
            del self._flushed[call_id]
        else:
            self._flushed[call_id] = count - 1
        return True

    def finish(self) -> Sequence[AgentResponseResult]:
        calls: list[Content]
        if self._eager:
            calls = [p.calling() for p in self._deferred]
            calls += [p.incomplete() for p in self._calls.values() if not p.ended]
        else:
            calls = [p.calling() for p in self._started]
        self._forget()
        if not calls:
            return ()
        return (AgentResponseResult(self._id, self._model, None, calls),)

    def fail(self, error: Exception) -> Sequence[AgentResponseResult]:
        cut = self._unflushed()  # what an ErrorContent has not already cut
        if not cut:
            return ()
        return (AgentResponseResult(self._id, self._model, None, cut),)

    def _forget(self) -> None:
        self._calls.clear()
        self._started.clear()
        self._deferred.clear()
        self._flushed.clear()


def flush_tool_calls(eager: bool = False) -> Operator[AgentResponseResult, AgentResponseResult]:
    """See :func:`rafrx.operators.flush_tool_calls`."""
    return reducer_operator(lambda: ToolCallFlusher(eager))
