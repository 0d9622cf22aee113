"""``execute_tools``: run each :class:`ToolCallingContent`, emit its :class:`ToolCalledContent`."""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeAlias

from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable, SingleAssignmentDisposable

from rafrx._call import call_function, call_on
from rafrx._cycles import without_frames
from rafrx._redaction import redact
from rafrx.content import ReasoningContent, ToolCalledContent, ToolCallingContent
from rafrx.errors import (
    ToolApprovalDenied,
    ToolError,
    ToolNotFound,
    error_text,
)
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.messages import MCP_APPROVAL_RESPONSE
from rafrx.operators._inputs import a_noun, not_a_result
from rafrx.response import AgentResponseResult
from rafrx.tools import Tool, ToolApprovalResponse, as_tool, format_result
from rafrx.typing import Operator

__all__ = ["Approver", "clip", "execute_tools", "tool_table"]

logger = logging.getLogger("rafrx.tools")

Approver: TypeAlias = (
    Callable[[ToolApprovalRequestEvent], Awaitable[bool | ToolApprovalResponse]]
    | Callable[[ToolApprovalRequestEvent], bool | ToolApprovalResponse]
    | Observable[ToolApprovalResponse]
)
"""An async or sync callable answering approval requests, or an observable of answers."""


def check_approver(approver: object) -> None:
    """Raise ``TypeError`` unless ``approver`` is one (or ``None``): a callable or an
    observable. A bool or a str would fail at each request, denying every call.

    Example:
        >>> check_approver(True)
        Traceback (most recent call last):
        ...
        TypeError: an approver is a callable answering each ToolApprovalRequestEvent (lambda event: True approves every call) or an observable of ToolApprovalResponse, not True
    """  # noqa: E501
    if approver is None or callable(approver) or isinstance(approver, Observable):
        return
    shown = repr(approver) if isinstance(approver, bool) else a_noun(type(approver).__name__)
    raise TypeError(
        "an approver is a callable answering each ToolApprovalRequestEvent (lambda event: "
        f"True approves every call) or an observable of ToolApprovalResponse, not {shown}"
    )


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how much was cut.

    Example:
        >>> clip("abcdef", 3)
        'abc… [truncated: 3 more characters]'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated: {len(text) - limit} more characters]"


#: Running tool calls, so that a call nobody holds a reference to still runs to its end.
_RUNNING: set[asyncio.Task[None]] = set()


class _LLMCall:
    """One LLM call as the runner sees it: the calls the provider ran itself (their
    ToolCalledContent came upstream) and its end, which a call of no tool of ours waits
    for (the provider may run it and say so after it, with eager tools)."""

    __slots__ = ("done", "ran", "waiters")

    def __init__(self) -> None:
        self.ran: set[str] = set()
        self.done = False
        self.waiters: list[asyncio.Future[None]] = []

    def end(self) -> None:
        """(On the loop's thread.)"""
        self.done = True
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    async def ended(self) -> None:
        """Once the call has ended. (On the loop's thread.)"""
        if not self.done:
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            await waiter


class _Runner:
    """The per-subscription state: running tasks, approvals, completion."""

    def __init__(
        self,
        observer: abc.ObserverBase[AgentResponseResult],
        tools: dict[str, Tool],
        approver: Approver | None,
        concurrency: int,
        max_chars: int,
        approval_timeout: float | None,
        closed: set[str] | None = None,
    ) -> None:
        self.observer = observer
        self.tools = tools
        self.approver = approver
        self.approval_timeout = approval_timeout
        self.max_chars = max_chars
        self.concurrency = concurrency
        self.semaphore: asyncio.Semaphore | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.home = _running_loop()  # where answers and disposal go before a tool starts
        self.tasks: set[asyncio.Task[None]] = set()
        self.seen: set[str] = set()
        self.answers: dict[str, ToolApprovalResponse] = {}
        # Calls whose request was answered or timed out: a later answer to one (a double
        # click, a late one) is dropped, until the id is asked about again. (An agent's
        # turn shares it between its LLM calls, whose runners are each their own.)
        self.closed: set[str] = set() if closed is None else closed
        self.waiting: dict[str, asyncio.Future[ToolApprovalResponse]] = {}
        # The request emitted last for each call id, not answered yet: the only one an
        # answer naming its request (ToolApprovalResponse.request) may answer.
        self.open_requests: dict[str, ToolApprovalRequestEvent] = {}
        self.answers_closed: str | None = None  # why no answer can come any more
        # The last remote answer's turn to go: answers go in the order of their requests.
        self.remote_turn: asyncio.Future[None] | None = None
        self.upstream = SingleAssignmentDisposable()
        self.upstream_done = False
        self.stopped = False
        self.llm_call = _LLMCall()  # the LLM call the results are of now

    # ------------------------------------------------------------ Rx side

    def on_next(self, result: AgentResponseResult) -> None:
        if self.stopped:
            return
        try:
            contents = result.contents
        except AttributeError:
            self.on_error(not_a_result(result, "execute_tools()"))
            return
        if result.events:
            for event in result.events:
                if isinstance(event, ResponseStartedEvent):
                    self.seen.clear()  # a new LLM call: an id may come back in it
                    self.end_call()
                    self.llm_call = _LLMCall()
                elif isinstance(event, FinishEvent):
                    self.end_call()
        if self.closed or self.open_requests:  # (else nothing to forget: most results)
            for content in contents:  # a new call: answers to its id may come on sight
                if isinstance(content, ToolCallingContent) and content.call_id not in self.seen:
                    self.closed.discard(content.call_id)
                    self.open_requests.pop(content.call_id, None)  # (its request is to come)
        for event in result.events:
            if isinstance(event, ToolApprovalRequestEvent):
                self.open(event)  # (the provider's: answers may come as it is seen)
        self.observer.on_next(result)
        for content in contents:
            if self.stopped:
                return
            if isinstance(content, ToolCalledContent):  # answered upstream (the provider ran
                self.seen.add(content.call_id)  # it, reported by ToolCalled): not run again
                self.llm_call.ran.add(content.call_id)
            elif isinstance(content, ToolCallingContent) and content.call_id not in self.seen:
                self.seen.add(content.call_id)
                self.start(self.run(content, result, self.llm_call), f"rafrx tool {content.name}")
        if self.approver is None:
            return  # (the provider's approval requests stay for the caller to answer)
        for event in result.events:
            if self.stopped:
                return
            if isinstance(event, ToolApprovalRequestEvent) and event.call_id not in self.seen:
                self.seen.add(event.call_id)  # (from upstream: the provider's own tool)
                self.start(self.answer_remote(event, result), f"rafrx approval {event.name}")

    def on_error(self, error: Exception) -> None:
        if not self.stopped:
            self.stop()
            self.terminate(self.observer.on_error, error)

    def on_completed(self) -> None:
        self.upstream_done = True
        self.end_call()
        self.maybe_complete()

    def end_call(self) -> None:
        """The LLM call ended: calls of no tool of ours stop waiting for the provider."""
        self.on_loop(self.llm_call.end)  # (on the loop's thread, as its waiters)

    def maybe_complete(self) -> None:
        if self.upstream_done and not self.tasks and not self.stopped:
            self.stop()
            self.terminate(self.observer.on_completed)

    def terminate(self, call: Callable[..., None], *args: Any) -> None:
        """Call a terminal method; from a tool's task, what it raises goes to the loop."""
        if self.loop is None:  # called from upstream: let it propagate as Rx does
            call(*args)
            return
        try:
            call(*args)
        except Exception as exc:  # e.g. reactivex's default on_error re-raising
            self.loop.call_exception_handler(
                {"message": "rafrx.execute_tools: an observer raised", "exception": exc}
            )

    def on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)`` on the loop's thread: the approver may answer from any (a UI's)."""
        loop = self.loop or self.home
        if loop is None:
            fn(*args)
        else:
            call_on(loop, functools.partial(fn, *args))

    def on_answer(self, answer: ToolApprovalResponse) -> None:
        self.on_loop(self.take_answer, answer)

    def open(self, request: ToolApprovalRequestEvent) -> None:
        """Take answers to ``request`` from now on (it is about to be emitted)."""
        self.closed.discard(request.call_id)  # (a later LLM call may reuse the id: ask again)
        self.open_requests[request.call_id] = request

    def take_answer(self, answer: ToolApprovalResponse) -> None:
        if answer.call_id in self.closed:
            return
        if answer.request is not None and answer.request is not self.open_requests.get(
            answer.call_id
        ):
            return  # an answer to a request that is over (a late one, a double click)
        future = self.waiting.pop(answer.call_id, None)
        if future is None:
            self.answers.setdefault(answer.call_id, answer)  # the first answer counts
        elif not future.done():
            self.closed.add(answer.call_id)
            future.set_result(answer)

    def on_answers_end(self, error: Exception | None = None) -> None:
        """The approver observable ended: no answer can come, so every request is denied."""
        self.on_loop(self.close_answers, error)

    def close_answers(self, error: Exception | None) -> None:
        why = "completed" if error is None else f"failed ({type(error).__name__})"
        self.answers_closed = f"the approver {why} before answering"
        for call_id, future in list(self.waiting.items()):
            if not future.done():
                future.set_result(ToolApprovalResponse(call_id, False, self.answers_closed))
        self.waiting.clear()

    def stop(self) -> None:
        self.stopped = True
        self.upstream.dispose()
        self.on_loop(self.cancel)  # (disposing may come from another thread)

    def cancel(self) -> None:
        """Cancel the running tools and the approvals awaited (on the loop's thread)."""
        for task in list(self.tasks):
            task.cancel()
        for future in self.waiting.values():
            future.cancel()

    # ------------------------------------------------------------ asyncio side

    def start(self, work: Coroutine[Any, Any, None], name: str) -> None:
        if self.loop is None:
            try:
                self.loop = asyncio.get_running_loop()
            except RuntimeError:
                work.close()
                self.on_error(
                    RuntimeError("execute_tools() runs tools on the running asyncio loop")
                )
                return
        task = self.loop.create_task(work, name=name)
        self.tasks.add(task)
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)
        task.add_done_callback(self.done)

    def done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        error = None if task.cancelled() else task.exception()
        if isinstance(error, Exception):  # a bug, not a tool failure: fail the stream
            self.on_error(error)
        self.maybe_complete()

    async def run(
        self, call: ToolCallingContent, result: AgentResponseResult, llm_call: _LLMCall
    ) -> None:
        if call.name not in self.tools:  # none of ours: the provider's, said by its end?
            await llm_call.ended()
            if call.call_id in llm_call.ran:
                return
        content = await self.call(call, result)
        self.emit(AgentResponseResult(result.id, result.model, None, (content,)))

    async def answer_remote(
        self, request: ToolApprovalRequestEvent, result: AgentResponseResult
    ) -> None:
        """Ask the approver about a tool the provider runs (a Responses MCP tool) and
        emit the answer as the block that goes back to it: an ``mcp_approval_response``."""
        assert self.approver is not None
        previous = self.remote_turn
        mine = self.remote_turn = asyncio.get_running_loop().create_future()
        try:
            await self.answer_remote_in_turn(request, result, previous)
        finally:
            if not mine.done():
                mine.set_result(None)

    async def answer_remote_in_turn(
        self,
        request: ToolApprovalRequestEvent,
        result: AgentResponseResult,
        previous: asyncio.Future[None] | None,
    ) -> None:
        """Ask, then emit the answer once the answer to the request before (``previous``)
        went: the approver is asked about every request at once, but the answers go
        back in the order the provider asked."""
        assert self.approver is not None
        answer: dict[str, Any] = {
            "type": MCP_APPROVAL_RESPONSE,
            "approval_request_id": request.call_id,
            "approve": True,
        }
        try:
            _check_answer(await self.ask(self.approver, request), request)
        except ToolApprovalDenied as denied:
            answer.update(approve=False, reason=clip(_said(denied), self.max_chars))
        except asyncio.CancelledError as exc:
            if _being_cancelled():
                raise without_frames(exc) from None
            answer.update(approve=False, reason=f"the approver was cancelled: {exc}")
        except Exception as exc:  # a failing approver: the gate fails closed
            why = f"the approver failed: {type(exc).__name__}: {_said(exc)}"
            answer.update(approve=False, reason=clip(why, self.max_chars))
        if not answer["approve"]:
            logger.info("remote tool %r (%r): %s", request.call_id, request.name, answer["reason"])
        if previous is not None:
            await asyncio.shield(previous)
        block = ReasoningContent("", provider_data=answer)
        self.emit(AgentResponseResult(result.id, result.model, None, (block,)))

    def emit(self, result: AgentResponseResult) -> None:
        if self.stopped:
            return
        try:
            self.observer.on_next(result)
        except Exception as exc:  # a downstream callback failed: end the stream with it
            self.on_error(exc)

    async def call(
        self, call: ToolCallingContent, result: AgentResponseResult
    ) -> ToolCalledContent:
        try:
            tool = self.tools.get(call.name)
            if tool is None:
                offered = ", ".join(sorted(self.tools)) or "none"
                raise ToolNotFound(f"unknown tool {call.name!r} (available: {offered})")
            invalid = call.invalid_arguments
            if invalid is not None:
                raise invalid
            tool.validate(call.arguments)  # fail before asking anyone to approve
            if tool.requires_approval:
                await self.approve(tool, call, result)
            if self.semaphore is None:
                self.semaphore = asyncio.Semaphore(self.concurrency)
            async with self.semaphore:  # (a copy: the call stays what the model sent)
                value = await tool.invoke(copy.deepcopy(call.arguments))
            text = format_result(value)
        except ToolError as exc:
            message = _said(exc)
            # (%r: the server chose the id and the name, a newline in them would forge a line)
            logger.info("tool call %r (%r) failed: %s", call.call_id, call.name, message)
            return ToolCalledContent(
                call.call_id, error=clip(message, self.max_chars), meta=call.meta
            )
        except asyncio.CancelledError as exc:
            if _being_cancelled():  # the stream was disposed or failed: this call ends
                raise without_frames(exc) from None
            return self.failed(call, exc)  # raised by the approver itself: still a result
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # format_result, or a failing approver
            return self.failed(call, exc)
        return ToolCalledContent(call.call_id, result=clip(text, self.max_chars), meta=call.meta)

    def failed(self, call: ToolCallingContent, error: BaseException) -> ToolCalledContent:
        """The error result of a call that failed outside the tool itself."""
        message = f"tool {call.name!r}: {type(error).__name__}: {_said(error)}"
        logger.info("tool call %r (%r) failed: %s", call.call_id, call.name, message)
        return ToolCalledContent(call.call_id, error=clip(message, self.max_chars), meta=call.meta)

    async def approve(
        self, tool: Tool, call: ToolCallingContent, result: AgentResponseResult
    ) -> None:
        approver = self.approver
        if approver is None:
            raise ToolApprovalDenied(
                f"tool {call.name!r} requires approval and no approver is configured; "
                "the call was not run"
            )
        # A copy: what an approver or a UI does to the event's arguments never reaches the call.
        arguments = copy.deepcopy(call.arguments)
        request = ToolApprovalRequestEvent(call.call_id, call.name, arguments, tool.description)
        self.open(request)
        self.emit(AgentResponseResult(result.id, result.model, None, (), (request,)))
        if self.stopped:  # disposed on seeing the request: no one is asked
            raise asyncio.CancelledError
        _check_answer(await self.ask(approver, request), request)

    async def ask(self, approver: Approver, request: ToolApprovalRequestEvent) -> Any:
        """The approver's answer to ``request``, within ``approval_timeout``."""
        try:
            async with asyncio.timeout(self.approval_timeout):
                return await self.answer(approver, request)
        except TimeoutError:
            self.closed.add(request.call_id)
            self.waiting.pop(request.call_id, None)
            raise ToolApprovalDenied(
                f"the call to tool {request.name!r} was denied: no answer to its approval "
                f"request within {self.approval_timeout:g} s; it was not run"
            ) from None

    async def answer(self, approver: Approver, request: ToolApprovalRequestEvent) -> Any:
        """The approver's answer to ``request``, however it gives it."""
        if isinstance(approver, Observable):
            answer: Any = self.answers.pop(request.call_id, None)
            if answer is not None:
                self.closed.add(request.call_id)
            elif self.answers_closed is not None:
                answer = ToolApprovalResponse(request.call_id, False, self.answers_closed)
            if answer is None:
                future = asyncio.get_running_loop().create_future()
                self.waiting[request.call_id] = future
                answer = await future
            return answer
        # A sync approver may block (a terminal prompt): it runs in a worker thread, which
        # a timeout leaves to finish on its own (its answer is then ignored).
        return await call_function(approver, (request,), {})


def _weakly(method: Callable[..., None]) -> Callable[..., None]:
    """``method``, called while its object lives: a runner stranded on a closed loop
    (never disposed) is not kept alive, with its turn, by an app-wide approver."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        bound = ref()
        if bound is not None:
            bound(*args)

    return call


def _said(error: BaseException) -> str:
    """What ``error`` says, without the secrets it may quote (a key in a tool's exception
    goes neither to the log nor to the model).

    Example:
        >>> _said(RuntimeError("401 with Bearer sk-proj-0123456789abcdefXYZ"))
        '401 with Bearer [REDACTED]'
    """
    return redact(error_text(error))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _being_cancelled() -> bool:
    """Whether the running task is being cancelled (not just seeing a CancelledError)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _check_answer(answer: Any, request: ToolApprovalRequestEvent) -> None:
    """Return if ``answer`` approves the call ``request`` asks about, else raise
    :class:`ToolApprovalDenied`.

    Only ``True``, or a :class:`ToolApprovalResponse` to this very call (and
    request, if it names one) whose ``approved`` is ``True``, approves: an
    approval gate fails closed, so a ``"no"`` from a UI or an answer to another
    call never runs a tool.
    """
    call_id, name = request.call_id, request.name
    if isinstance(answer, ToolApprovalResponse):
        if answer.call_id != call_id:
            raise ToolApprovalDenied(
                f"the call to tool {name!r} was denied: the approver answered call "
                f"{answer.call_id!r}, not {call_id!r}"
            )
        if answer.request is not None and answer.request is not request:
            raise ToolApprovalDenied(
                f"the call to tool {name!r} was denied: the approver answered another "
                f"request of call {call_id!r} (an earlier one), not this one"
            )
        if answer.approved is True:
            return
        if answer.approved is False:
            reason = f": {answer.reason}" if answer.reason else "; it was not run"
            raise ToolApprovalDenied(f"the user denied the call to tool {name!r}{reason}")
        answer = answer.approved
    if answer is True:
        return
    if answer is False or answer is None:
        raise ToolApprovalDenied(f"the user denied the call to tool {name!r}; it was not run")
    raise ToolApprovalDenied(
        f"the call to tool {name!r} was denied: the approver answered "
        f"{clip(repr(answer), 200)} ({type(answer).__name__}), not True or False"
    )


def tool_table(tools: Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """The tools by name (functions made tools); a ``ValueError`` if two share a name.

    Example:
        >>> def now() -> str:
        ...     return "12:00"
        >>> list(tool_table([now]))
        ['now']
        >>> tool_table([now, now])
        Traceback (most recent call last):
        ...
        ValueError: two tools are named 'now'
    """
    table: dict[str, Tool] = {}
    for item in tools:
        t = as_tool(item)
        if t.name in table:
            raise ValueError(f"two tools are named {t.name!r}")
        table[t.name] = t
    return table


def execute_tools(
    tools: Iterable[Tool | Callable[..., Any]],
    approver: Approver | None = None,
    *,
    concurrency: int = 8,
    max_result_chars: int = 100_000,
    approval_timeout: float | None = None,
    closed: set[str] | None = None,
) -> Operator[AgentResponseResult, AgentResponseResult]:
    """See :func:`rafrx.operators.execute_tools`; ``closed``: the ids of the requests
    answered (or timed out) already, shared with other subscriptions (an agent's turn
    makes one per LLM call), whose late answers are dropped (see ``_Runner.closed``)."""
    table = tool_table(tools)
    check_approver(approver)
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if max_result_chars < 0:
        raise ValueError(f"max_result_chars must be 0 or more, got {max_result_chars}")
    if approval_timeout is not None and not approval_timeout > 0:
        raise ValueError(f"approval_timeout must be positive or None, got {approval_timeout}")

    def operator(source: Observable[AgentResponseResult]) -> Observable[AgentResponseResult]:
        def subscribe(
            observer: abc.ObserverBase[AgentResponseResult],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            runner = _Runner(
                observer, table, approver, concurrency, max_result_chars, approval_timeout, closed
            )
            answers = SingleAssignmentDisposable()
            if isinstance(approver, Observable):  # (long-lived: it must not keep the runner)
                answers.disposable = approver.subscribe(
                    _weakly(runner.on_answer),
                    _weakly(runner.on_answers_end),
                    _weakly(runner.on_answers_end),
                )
            runner.upstream.disposable = source.subscribe(
                runner.on_next, runner.on_error, runner.on_completed, scheduler=scheduler
            )
            return CompositeDisposable(Disposable(runner.stop), answers)

        return Observable(subscribe)

    return operator
