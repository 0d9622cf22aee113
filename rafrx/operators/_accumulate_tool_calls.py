"""``accumulate_tool_calls``: updates → :class:`AgentResponseResult` chunks."""

from __future__ import annotations

from collections.abc import Sequence

from rafrx import updates as u
from rafrx._fragments import has_surrogates, join_surrogates
from rafrx.content import (
    Content,
    ErrorContent,
    ResponseMetadata,
    ToolCallArgsContent,
    ToolCalledContent,
    ToolCallStartContent,
    UriContent,
    UsageContent,
)
from rafrx.errors import LimitExceeded, ProtocolError, ProviderError, error_text
from rafrx.events import Event, FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.operators._builders import (
    agent_result,
    args_content,
    end_content,
    reasoning_content,
    start_content,
    text_content,
)
from rafrx.operators._reducer import reducer_operator
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.typing import Operator

__all__ = ["DEFAULT_MAX_ARGUMENT_CHARS", "OpenCall", "ToolCallAccumulator", "accumulate_tool_calls"]

#: Default cap on one call's arguments (characters); past it the stream fails.
DEFAULT_MAX_ARGUMENT_CHARS = 64 * 1024 * 1024


class OpenCall:
    """An open call as the accumulator tracks it (see :meth:`ToolCallAccumulator.open_call`)."""

    __slots__ = ("ended", "high", "name", "size")

    def __init__(self, name: str) -> None:
        self.name = name
        self.size = 0
        self.ended = False
        self.high = ""  # a high surrogate that ended the last fragment, until its low half

    def whole(self, delta: str) -> str:
        """``delta`` in whole characters: an emoji's UTF-16 halves, which a server slicing
        by UTF-16 units sends in two fragments, as one character (a high half that ends
        a fragment waits for the next one).

        Example:
            >>> call = OpenCall("f")
            >>> call.whole('{"s": "a\\ud83d'), call.whole('\\ude00"}') == '\\U0001f600"}'
            ('{"s": "a', True)
        """
        delta, self.high = self.high + delta, ""
        if delta and "\ud800" <= delta[-1] <= "\udbff":
            delta, self.high = delta[:-1], delta[-1]
        return join_surrogates(delta)


class ToolCallAccumulator:
    """The reducer behind :func:`accumulate_tool_calls`.

    Example:
        >>> acc = ToolCallAccumulator()
        >>> [r.contents for r in acc.step(u.TextDelta("Hi"))]
        [(TextContent(text='Hi'),)]
        >>> acc.step(u.TextDelta("!"))[0].events
        ()
    """

    __slots__ = ("_calls", "_finished_one", "_id", "_in_call", "_max", "_meta", "_model")

    def __init__(self, max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS) -> None:
        self._id: str | None = None
        self._model: str | None = None
        self._meta = ResponseMetadata()
        self._calls: dict[str, OpenCall] = {}
        self._in_call = False
        self._finished_one = False  # a Finish came: out of a call, the last one finished
        self._max = max_argument_chars

    def result(
        self,
        contents: tuple[Content, ...],
        events: tuple[Event, ...] = (),
        finish_reason: FinishReason | None = None,
    ) -> AgentResponseResult:
        """The result carrying ``contents`` (the LLM call's first also carries its start)."""
        if not self._in_call:
            self._in_call = True
            events = (ResponseStartedEvent(self._id, self._model), *events)
        return agent_result(self._id, self._model, finish_reason, contents, events)

    @property
    def max_argument_chars(self) -> int:
        """The cap on one call's arguments."""
        return self._max

    @property
    def meta(self) -> ResponseMetadata:
        """The metadata the next content carries."""
        return self._meta

    def open_call(self, call_id: str) -> OpenCall | None:
        """The call, if it is started and not ended (its ``size`` is the arguments' so far).

        While no update but argument fragments of open calls passes
        :meth:`step`, this stays valid, and ``result(contents)`` is
        ``AgentResponseResult(meta.id, meta.model, None, contents)``.
        """
        call = self._calls.get(call_id)
        return None if call is None or call.ended or not self._in_call else call

    def arguments(self, call_id: str, args_delta: str) -> ToolCallArgsContent | None:
        """The content for an argument fragment; None for an empty one.

        Raises:
            ProtocolError: The call is not open.
            LimitExceeded: The call's arguments passed ``max_argument_chars``.
        """
        if not args_delta:
            return None  # an empty delta (some servers send one after the end)
        call = self._calls.get(call_id)
        if call is None or call.ended:
            raise ProtocolError(f"arguments for a tool call that is not open: {call_id!r}")
        if call.high or (not args_delta.isascii() and has_surrogates(args_delta)):
            args_delta = call.whole(args_delta)
            if not args_delta:
                return None  # (a high half alone: it waits for its other half)
        call.size += len(args_delta)
        if call.size > self._max:
            raise LimitExceeded(
                f"arguments of tool call {call_id!r} ({call.name}) exceed {self._max} characters",
                limit=self._max,
            )
        return args_content(call_id, args_delta, self._meta)

    def start(self, call_id: str, name: str) -> ToolCallStartContent | None:
        """The content for ``ToolCallStart(call_id, name)``, the call now open; None
        for a duplicate start (what :meth:`step` does, without the match)."""
        if call_id in self._calls:
            return None  # a duplicate start
        self._calls[call_id] = OpenCall(name)
        return start_content(call_id, name, self._meta)

    def end(self, call_id: str, call: OpenCall) -> tuple[Content, ...]:
        """The contents for ``ToolCallEnd(call_id)`` of ``call``, open (what :meth:`step`
        does, without the match): the high surrogate it held, if any (see
        :meth:`_held_half`), then its end. The call is ended."""
        call.ended = True
        end = end_content(call_id, self._meta)
        return (*self._held_half(call_id, call), end) if call.high else (end,)

    def text(self, delta: str) -> AgentResponseResult:
        """The result for ``TextDelta(delta)`` (what :meth:`step` returns, without the match)."""
        return self.result((text_content(delta, self._meta),))

    def reasoning(self, update: u.ReasoningDelta) -> AgentResponseResult:
        """The result for ``update`` (what :meth:`step` returns, without the match)."""
        return self.result((reasoning_content(update.delta, self._meta, update.provider_data),))

    def step(self, update: u.Update) -> Sequence[AgentResponseResult]:
        meta = self._meta
        match update:
            case u.TextDelta(delta):
                return (self.text(delta),)
            case u.ToolCallArgs(call_id, args_delta):
                args = self.arguments(call_id, args_delta)
                return () if args is None else (self.result((args,)),)
            case u.ReasoningDelta():
                return (self.reasoning(update),)
            case u.ToolCallStart(call_id, name):
                start = self.start(call_id, name)
                return () if start is None else (self.result((start,)),)
            case u.ToolCallEnd(call_id):
                call = self._calls.get(call_id)
                if call is None or call.ended:
                    return ()
                return (self.result(self.end(call_id, call)),)
            case u.Usage(usage):
                return (self.result((UsageContent(usage, meta=meta),)),)
            case u.Finish(reason, usage):
                contents: tuple[Content, ...] = self._held_halves()
                if usage is not None:
                    contents = (*contents, UsageContent(usage, meta=meta))
                result = self.result(contents, (FinishEvent(reason, usage),), reason)
                self._in_call = False
                self._finished_one = True
                self._calls.clear()
                return (result,)
            case u.ResponseMetadata(response_id, model):
                self._id = response_id if response_id is not None else self._id
                self._model = model if model is not None else self._model
                self._meta = ResponseMetadata(self._id, self._model)
                return (self.result(()),)
            case u.Uri(uri, media_type):
                return (self.result((UriContent(uri, media_type, meta=meta),)),)
            case u.ToolCalled(call_id, result, error):
                return (self.result((ToolCalledContent(call_id, result, error, meta=meta),)),)
            case u.ToolApprovalRequest(call_id, name, arguments, description):
                event = ToolApprovalRequestEvent(call_id, name, arguments, description)
                return (self.result((), (event,)),)
            case u.Error(message):
                raise ProviderError(message, error_type=update.error_type)
            case u.ToolCallDelta():
                raise ProtocolError(
                    "ToolCallDelta reached accumulate_tool_calls(): "
                    "put split_legacy_delta() before it (or use convert())"
                )
        raise TypeError(f"not an AgentResponseUpdate: {update!r}")

    def finish(self) -> Sequence[AgentResponseResult]:
        return ()

    def fail(self, error: Exception) -> Sequence[AgentResponseResult]:
        """The error as content: of the LLM call under way, or of the one that just
        finished (a stream that stalls after its finish reason, before ``[DONE]`` or
        ``message_stop``): an error starts no LLM call of its own."""
        message = error_text(error) or type(error).__name__
        contents = (*self._held_halves(), ErrorContent(message, meta=self._meta))
        if self._finished_one and not self._in_call:
            return (AgentResponseResult(self._id, self._model, None, contents),)
        return (self.result(contents),)

    def _held_halves(self) -> tuple[Content, ...]:
        """The high surrogates that open calls hold (they end cut short: their
        ``raw_arguments`` keep what arrived)."""
        return tuple(
            c for call_id, call in self._calls.items() for c in self._held_half(call_id, call)
        )

    def _held_half(self, call_id: str, call: OpenCall) -> tuple[Content, ...]:
        """The high surrogate ``call`` holds, if any, as the fragment it came as: its
        arguments end without the other half."""
        if not call.high:
            return ()
        held, call.high = call.high, ""
        return (args_content(call_id, held, self._meta),)


def accumulate_tool_calls(
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
) -> Operator[u.Update, AgentResponseResult]:
    """See :func:`rafrx.operators.accumulate_tool_calls`."""
    return reducer_operator(lambda: ToolCallAccumulator(max_argument_chars))
