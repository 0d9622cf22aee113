"""``aggregate``: result chunks → one :class:`AgentResponse`."""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from typing import Any

import attrs
from reactivex import Observable

from rafrx._cycles import Outcome
from rafrx._fragments import COMPACT_AT, compact, join_surrogates, joined
from rafrx.content import (
    ReasoningContent,
    TextContent,
    ToolCalledContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
    UsageContent,
)
from rafrx.errors import ProviderError, RafrxError
from rafrx.events import Event, FinishEvent, ResponseStartedEvent
from rafrx.messages import (
    ChatMessage,
    MessageRole,
    MessageSource,
    ToolCall,
    provider_data_of,
)
from rafrx.operators._flush_tool_calls import parse_arguments
from rafrx.operators._inputs import check_stream, not_a_result
from rafrx.operators._reducer import reducer_operator
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage
from rafrx.typing import Operator

__all__ = ["ResponseAggregator", "aggregate", "collect_agent_response"]


class _Step:
    """What one LLM call of the turn contributed."""

    __slots__ = (
        "calls",
        "finished",
        "order",
        "provider_data",
        "reasoning",
        "reasoning_blocks",
        "results",
        "started",
        "text",
        "text_blocks",
        "usage",
    )

    def __init__(self) -> None:
        self.text: list[str] = []  # deltas since the last block (rafrx._fragments)
        self.text_blocks: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_blocks: list[str] = []
        self.provider_data: list[Any] = []
        self.order: list[str] = []  # call ids in start order
        self.started: set[str] = set()  # the same ids
        self.calls: dict[str, ToolCall] = {}
        self.results: dict[str, ChatMessage] = {}
        self.usage: Usage | None = None
        self.finished = False  # its LLM call's FinishEvent came

    def assistant_message(
        self, text: str, reasoning: str, calls: list[ToolCall]
    ) -> ChatMessage | None:
        """The step's assistant message, given its :meth:`joined_text`,
        :meth:`joined_reasoning` and :meth:`ordered_calls` (which
        :meth:`ResponseAggregator.response` also needs: made once)."""
        # A call cut short stays out: no result answers it, and providers refuse that.
        calls = [c for c in calls if c.complete]
        provider_data = self.provider_data
        if not (text or calls or reasoning or provider_data):
            return None
        return ChatMessage(
            MessageRole.ASSISTANT,
            text,
            tool_calls=calls or None,
            reasoning=reasoning or None,
            provider_data=provider_data_of(provider_data) if provider_data else None,
        )

    def ordered_calls(self) -> list[ToolCall]:
        return [self.calls[i] for i in self.order if i in self.calls]

    def joined_text(self) -> str:
        return join_surrogates(joined(self.text_blocks, self.text))

    def joined_reasoning(self) -> str:
        return join_surrogates(joined(self.reasoning_blocks, self.reasoning))

    def tool_messages(self) -> list[ChatMessage]:
        ordered = [self.results[i] for i in self.order if i in self.results]
        if len(ordered) < len(self.results):  # results of calls never started, as they came
            started = self.started
            ordered.extend(m for i, m in self.results.items() if i not in started)
        return ordered


def _tool_message(content: ToolCalledContent) -> ChatMessage:
    failed = content.error is not None
    text = f"Error: {content.error}" if failed else content.result
    return ChatMessage.tool(
        text or "", content.call_id, source=MessageSource.TOOL_RESULT, is_error=failed
    )


def _unrun_call(content: ToolCallIncompleteContent) -> ToolCall:
    """The call that never ran: complete, with its parsed arguments, when they were
    whole (its stream failed after they ended), else cut short."""
    if content.whole:
        arguments, error = parse_arguments(content.raw_arguments)
        raw = content.raw_arguments if error else None
        return ToolCall(content.call_id, content.name, arguments, raw_arguments=raw, error=error)
    return ToolCall(
        content.call_id,
        content.name,
        None,
        raw_arguments=content.raw_arguments,
        error=content.error,
        complete=False,
        partial_value=content.partial_value,
    )


_AGGREGATED = frozenset(
    {
        TextContent,
        ReasoningContent,
        ToolCallStartContent,
        ToolCallingContent,
        ToolCallIncompleteContent,
        ToolCalledContent,
        UsageContent,
    }
)


class ResponseAggregator:
    """The reducer behind :func:`aggregate`; :meth:`response` is the turn so far."""

    __slots__ = ("_agent_id", "_finish", "_id", "_model", "_steps", "_waiting")

    def __init__(self, agent_id: str | None = None) -> None:
        self._agent_id = agent_id
        self._steps: list[_Step] = []
        # call id -> the steps that started it and have not had it handed over, oldest first
        self._waiting: dict[str, deque[_Step]] = {}
        self._id: str | None = None
        self._model: str | None = None
        self._finish: FinishReason | None = None

    def step(self, result: AgentResponseResult) -> Sequence[AgentResponse]:
        try:
            contents = result.contents
        except AttributeError:
            raise not_a_result(result, "aggregate()") from None
        if result.id is not None:
            self._id = result.id
        if result.model is not None:
            self._model = result.model
        if result.events:  # (rare: most results carry contents only)
            self._events(result.events)
        steps = self._steps
        if not steps:
            steps.append(_Step())
        step = steps[-1]
        for content in contents:
            if type(content) not in _AGGREGATED:
                continue  # argument deltas, progress, ends: the response does not keep them
            if isinstance(content, TextContent):
                text = step.text
                text.append(content.text)
                if len(text) >= COMPACT_AT:
                    compact(text, step.text_blocks)
            elif isinstance(content, ReasoningContent):
                reasoning = step.reasoning
                reasoning.append(content.text)
                if len(reasoning) >= COMPACT_AT:
                    compact(reasoning, step.reasoning_blocks)
                if content.provider_data is not None:
                    step.provider_data.append(content.provider_data)
            elif isinstance(content, ToolCallStartContent):
                step.order.append(content.call_id)
                step.started.add(content.call_id)
                self._waiting.setdefault(content.call_id, deque()).append(step)
            elif isinstance(content, ToolCallingContent):
                self._step_started(content.call_id, step).calls[content.call_id] = ToolCall(
                    content.call_id,
                    content.name,
                    content.arguments,
                    raw_arguments=content.raw_arguments if content.error else None,
                    error=content.error,
                )
            elif isinstance(content, ToolCallIncompleteContent):
                self._step_started(content.call_id, step).calls[content.call_id] = _unrun_call(
                    content
                )
            elif isinstance(content, ToolCalledContent):
                self._step_of(content.call_id, step).results[content.call_id] = _tool_message(
                    content
                )
            elif isinstance(content, UsageContent):
                step.usage = content.usage  # cumulative within a call: the last one counts
        return ()

    def _events(self, events: tuple[Event, ...]) -> None:
        """Open a step for each LLM call that starts; note how each one finishes."""
        steps = self._steps
        for event in events:
            if isinstance(event, ResponseStartedEvent) or not steps:
                steps.append(_Step())
            if isinstance(event, FinishEvent):
                self._finish = event.finish_reason
                steps[-1].finished = True
                if event.usage is not None:
                    steps[-1].usage = event.usage

    def _step_started(self, call_id: str, current: _Step) -> _Step:
        """The step whose LLM call started ``call_id`` and has not had it handed over
        (with the lazy flush over several LLM calls, every call comes at the end; an id
        an LLM call reuses goes to the earliest such step); else ``current``, which
        then lists it."""
        waiting = self._waiting.get(call_id)
        if waiting:
            step = waiting.popleft()
            if not waiting:
                del self._waiting[call_id]
            return step
        if call_id not in current.started:
            current.order.append(call_id)
            current.started.add(call_id)
        return current

    def _step_of(self, call_id: str, current: _Step) -> _Step:
        """The step whose LLM call made ``call_id`` (a tool's result may come after the
        next LLM call started); the current one when none did."""
        if call_id in current.calls:
            return current
        for step in reversed(self._steps):
            if call_id in step.calls:
                return step
        return current

    def response(self, *, interrupted: bool = False) -> AgentResponse:
        """The :class:`AgentResponse` of everything seen so far."""
        transcript: list[ChatMessage] = []
        tool_calls: list[ToolCall] = []
        tool_messages: list[ChatMessage] = []
        usage: Usage | None = None
        texts: list[str] = []
        reasonings: list[str] = []
        for step in self._steps:
            text = step.joined_text()
            reasoning = step.joined_reasoning()
            calls = step.ordered_calls()
            texts.append(text)
            reasonings.append(reasoning)
            message = step.assistant_message(text, reasoning, calls)
            if message is None and step.finished and step is self._steps[-1]:
                message = ChatMessage(MessageRole.ASSISTANT, "")  # the final answer was empty
            if message is not None:
                transcript.append(message)
            tool_calls.extend(calls)
            results = step.tool_messages()
            tool_messages.extend(results)
            transcript.extend(results)
            if step.usage is not None:
                usage = step.usage if usage is None else usage + step.usage
        reasoning_text = "".join(reasonings)
        return AgentResponse(
            id=self._id,
            model=self._model,
            text="".join(texts),
            reasoning_text=reasoning_text or None,
            tool_calls=tool_calls,
            tool_messages=tool_messages,
            turn_transcript=transcript,
            finish_reason=self._finish,
            usage=usage,
            source_agent_id=self._agent_id,
            interrupted=interrupted,
        )

    def finish(self) -> Sequence[AgentResponse]:
        return (self.response(),)

    def fail(self, error: Exception) -> Sequence[AgentResponse]:
        if isinstance(error, RafrxError) and error.partial is None:
            error.partial = self.failed(error)
        return ()

    def failed(self, error: Exception) -> AgentResponse:
        """The turn so far, interrupted by ``error``. When its last LLM call did not
        finish, neither did the turn: a provider's error event closes it with finish
        reason ``ERROR``, anything else leaves it without one (not an earlier call's)."""
        response = self.response(interrupted=True)
        if self._steps and self._steps[-1].finished:
            return response
        reason = FinishReason.ERROR if isinstance(error, ProviderError) else None
        return attrs.evolve(response, finish_reason=reason)


def aggregate(agent_id: str | None = None) -> Operator[AgentResponseResult, AgentResponse]:
    """See :func:`rafrx.operators.aggregate`."""
    return reducer_operator(functools.partial(ResponseAggregator, agent_id))


async def collect_agent_response(
    results: Observable[AgentResponseResult], *, agent_id: str | None = None
) -> AgentResponse:
    """Await the :class:`AgentResponse` of a stream of results.

    Applies :func:`aggregate` itself. Cancelling the awaiting task disposes
    the subscription (which aborts the HTTP request of a client source).
    Works with ``await`` at the top level of a Jupyter cell.

    Raises:
        RafrxError: the stream's error, with ``.partial`` holding what arrived.

    Example:
        >>> import asyncio, reactivex
        >>> from rafrx import updates as u
        >>> from rafrx.operators import convert
        >>> results = reactivex.of(u.TextDelta("Hi "), u.TextDelta("there")).pipe(convert())
        >>> asyncio.run(collect_agent_response(results)).text
        'Hi there'
    """
    check_stream(results, "collect_agent_response()")
    outcome: Outcome[AgentResponse] = Outcome()
    subscription = results.pipe(aggregate(agent_id)).subscribe(
        outcome.set_result, outcome.set_exception
    )
    try:
        return await outcome.wait()
    finally:
        subscription.dispose()
