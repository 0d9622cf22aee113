"""The agent loop: LLM calls and tool runs until the model answers.

An :class:`Agent` pairs a client (anything with ``stream(messages, tools)``
returning an ``Observable`` of :data:`~rafrx.AgentResponseUpdate`) with
tools, instructions, history and context. :meth:`Agent.run` returns one cold
``Observable[AgentResponseResult]`` covering every LLM call of the turn: each
call is piped through :func:`~rafrx.operators.convert` and
:func:`~rafrx.operators.execute_tools`, and while the model calls tools their
results are fed back for another call. ``aggregate()`` of it gives the turn's
:class:`~rafrx.AgentResponse`.

Example:
    >>> import asyncio, reactivex
    >>> from rafrx import updates as u, FinishReason
    >>> from rafrx.tools import tool
    >>> @tool
    ... def add(a: int, b: int) -> int:
    ...     '''Add two numbers.'''
    ...     return a + b
    >>> class Scripted:  # a stand-in for OpenAIChatClient & co.
    ...     def __init__(self, *turns): self.turns = list(turns)
    ...     def stream(self, messages, tools=None):
    ...         return reactivex.from_iterable(self.turns.pop(0))
    >>> client = Scripted(
    ...     [u.ToolCallStart("c1", "add"), u.ToolCallArgs("c1", '{"a": 2, "b": 3}'),
    ...      u.ToolCallEnd("c1"), u.Finish(FinishReason.TOOL_CALLS)],
    ...     [u.TextDelta("2 + 3 = 5"), u.Finish(FinishReason.STOP)])
    >>> agent = Agent(client, tools=[add], id="calc")
    >>> response = asyncio.run(agent.send("What is 2 + 3?"))
    >>> response.text, response.source_agent_id
    ('2 + 3 = 5', 'calc')
    >>> [(m.role.value, m.content) for m in response.turn_transcript]
    [('assistant', ''), ('tool', '5'), ('assistant', '2 + 3 = 5')]
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeAlias

import reactivex
from reactivex import Observable, abc
from reactivex import operators as rx_ops
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from rafrx._call import call_on
from rafrx._cycles import Outcome, let_go
from rafrx.errors import (
    HTTPStatusError,
    MaxStepsExceeded,
    RafrxError,
    TransportError,
    TurnTimeout,
    error_text,
)
from rafrx.history import ContextProvider, HistoryProvider
from rafrx.messages import (
    ChatMessage,
    MessageRole,
    MessageSource,
    answers_approvals,
    checked_messages,
    is_paused,
    paired,
)
from rafrx.operators import convert
from rafrx.operators._aggregate import ResponseAggregator, collect_agent_response
from rafrx.operators._execute_tools import (
    Approver,
    check_approver,
    clip,
    execute_tools,
    tool_table,
)
from rafrx.operators._inputs import a_noun
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason
from rafrx.sources._policy import parse_retry_after, request_id
from rafrx.tools import Tool, as_tool
from rafrx.typing import Operator
from rafrx.updates import ToolCalled, Update

__all__ = ["Agent", "ChatClient", "ServerTool"]

logger = logging.getLogger(__name__)

#: Running turns, so that a turn nobody holds a reference to still runs to its end.
_RUNNING: set[asyncio.Task[None]] = set()

#: The tasks of turns ending because their event loop ends (asyncio.run returned): a turn
#: their observers start meanwhile could never end (the loop closes right after).
_LOOP_ENDING: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


ServerTool: TypeAlias = Mapping[str, Any]
"""A tool the provider defines and runs itself, as the provider's request shapes it."""


def _offered(value: Tool | Callable[..., Any] | ServerTool) -> Tool | ServerTool:
    """A tool as the client offers it: a server tool's mapping as is, else a :class:`Tool`."""
    return value if isinstance(value, Mapping) else as_tool(value)


def _tool_name(value: Tool | Callable[..., Any] | ServerTool) -> str:
    if isinstance(value, Mapping):
        return str(value.get("name") or value.get("type"))
    return as_tool(value).name


class ChatClient(Protocol):
    """What an :class:`Agent` needs from a client: one cold stream per LLM call, emitting
    on the thread of the loop the turn runs on, where its tools run (as rafrx's clients
    do; one that emits from a worker thread can add ``reactivex.operators.observe_on``
    with an ``AsyncIOScheduler`` of that loop)."""

    def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[Tool | ServerTool] | None = None
    ) -> Observable[Update]:
        """The updates of one LLM call over ``messages``, offering ``tools``: each a
        :class:`Tool` or a :data:`ServerTool` mapping (server tools the agent was given,
        which rafrx's clients send as they are)."""
        ...


def _what(value: object) -> str:
    """What ``value`` is, for an error: a class by name, else its type's (never its
    content, which may hold a key)."""
    if isinstance(value, type):
        return f"the class {value.__name__} (give an instance)"
    return a_noun(type(value).__name__)


def _as_input(value: str | ChatMessage | Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
    if isinstance(value, str):
        return (ChatMessage.user(value, source=MessageSource.EXTERNAL),)
    expected = "an agent's input is a str, a ChatMessage or a sequence of ChatMessages"
    messages = checked_messages(value, expected)
    return tuple(m if m.source else m.with_source(MessageSource.EXTERNAL) for m in messages)


def _paired_before(
    loaded: list[ChatMessage], new_input: Sequence[ChatMessage]
) -> list[ChatMessage]:
    """The loaded history repaired by :func:`~rafrx.messages.paired`, where the tool results
    that open the new input answer the calls the history ends with (a user who ran them).

    Example:
        >>> from rafrx.messages import ToolCall
        >>> call = ChatMessage.assistant_with_tools("", [ToolCall("c1", "now", {})])
        >>> _paired_before([call], [ChatMessage.tool("12:00", "c1")]) == [call]
        True
    """
    answers: list[ChatMessage] = []
    for message in new_input:
        if message.role is not MessageRole.TOOL:
            break
        answers.append(message)
    given = {id(m) for m in answers}
    return [m for m in paired([*loaded, *answers]) if id(m) not in given]


async def _result(value: Any) -> Any:
    """``value``, awaited if it is awaitable: a history or context provider's method may be
    a plain function (the protocols' are async, but a sync one is easy to write)."""
    return await value if inspect.isawaitable(value) else value


def _messages_from(provider: object, method: str, value: Any) -> list[ChatMessage]:
    """What a history or context provider returned, checked to be messages.

    Raises:
        TypeError: ``value`` is not an iterable of :class:`ChatMessage` (a
            str, a dict, ``None`` …): the error names the provider and the value.
    """
    iterable = isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping)
    messages = list(value) if iterable else [value]
    for message in messages:
        if not isinstance(message, ChatMessage):
            raise TypeError(
                f"{type(provider).__name__}.{method} gave {clip(repr(message), 200)}, "
                "not a ChatMessage"
            )
    return messages


class Agent:
    """Runs turns: LLM calls, tool runs and approvals, history and context.

    Args:
        client: Has ``stream(messages, tools)`` returning an ``Observable``
            of updates (``OpenAIChatClient``, ``AnthropicClient``,
            ``OpenAIResponsesClient``, or your own).
        tools: :class:`~rafrx.tools.Tool` values, plain functions (made
            into tools with ``@tool``), or mappings of tools the provider runs
            itself (Anthropic's ``{"type": "web_search_20250305", ...}``, the
            Responses API's ``{"type": "web_search"}``): offered as given, never
            run here. A call to a tool made with ``@tool(ends_turn=True)`` that
            returns a result ends the turn once the calls of its LLM call have
            run: no LLM call follows, the turn's transcript ends with the tool
            results (``finish_reason`` ``TOOL_CALLS``) and is saved to history
            as any turn is; a call of it that fails lets the model go on.
        instructions: A system message sent first in every LLM call.
        history: Loaded before each turn and given the turn's new messages
            after it succeeds, unless the provider refused or filtered its
            answer (finish reason ``content_filter``: Anthropic requires the
            refused exchange to leave the conversation). A turn saves to the
            history it loaded (one assigned meanwhile serves the next turn);
            the turns of every agent on one history load and save it in turn,
            so a handoff between agents never interleaves two saves.
        context_providers: Asked for extra messages at the start of each turn.
        approver: Answers approval requests of tools that require approval
            (see :func:`~rafrx.operators.execute_tools`). An observable of
            answers serves one turn at a time, of any agent: answers go to calls
            by id, and two turns may be given the same id (Kimi's
            ``functions.f:0``), so a turn subscribed while another runs with the
            same observable fails with ``RuntimeError``. One assigned mid-turn
            serves the turn from its next LLM call on (the one before serves it no
            more); if it serves another running turn, this one fails so.
        max_steps: The most LLM calls a turn may make.
        id: The agent's id (``source_agent_id`` of its responses); generated
            when not given.
        concurrency: The most tools running at once in one LLM call.
        max_result_chars: Longest tool result or error sent back to the model.
        eager_tools: Start each tool as soon as its arguments are complete,
            while the model still streams later calls.
        approval_timeout: Seconds an approval request may wait for its
            answer; then the call is denied (``None``: no limit).
        reset_tool_choice: Once an LLM call of the turn used tools, send
            the turn's later calls with ``tool_choice`` back to auto when the
            client's forces a tool call (``"required"``, a named tool,
            Anthropic's ``any``), which would never let the model answer (as
            OpenAI's Agents SDK does). For clients with ``params`` whose
            ``stream`` takes ``tool_choice`` as a keyword (rafrx's take any
            body field); ``False`` sends the client's ``tool_choice`` every time.

    The arguments are kept as attributes of the same names; assigning
    ``tools`` or ``approver`` takes effect from the next LLM call on. A
    ``client`` without ``stream``, a ``history`` without ``load`` and ``save``
    or an ``approver`` neither callable nor observable (``True``) is a
    ``TypeError``, given or assigned.

    Example:
        >>> import asyncio
        >>> from rafrx.sources.clients import OpenAIChatClient
        >>> from rafrx.testing import LLMServer, Reply, ToolCallSpec
        >>> def add(a: int, b: int) -> int:
        ...     "Add two numbers."
        ...     return a + b
        >>> async def main() -> str:
        ...     async with LLMServer() as server:  # a scripted model on 127.0.0.1
        ...         server.enqueue(Reply(tool_calls=[ToolCallSpec("add", {"a": 2, "b": 3})]),
        ...                        Reply(text="2 + 3 = 5"))
        ...         async with OpenAIChatClient(server.url, model="m") as client:
        ...             response = await Agent(client, tools=[add]).send("2 + 3?")
        ...     return f"{response.tool_messages[0].content} → {response.text}"
        >>> asyncio.run(main())
        '5 → 2 + 3 = 5'
    """

    def __init__(
        self,
        client: ChatClient,
        tools: Iterable[Tool | Callable[..., Any] | ServerTool] = (),
        instructions: str | None = None,
        history: HistoryProvider | None = None,
        context_providers: Iterable[ContextProvider] = (),
        approver: Approver | None = None,
        max_steps: int = 10,
        id: str | None = None,
        *,
        concurrency: int = 8,
        max_result_chars: int = 100_000,
        eager_tools: bool = False,
        approval_timeout: float | None = None,
        reset_tool_choice: bool = True,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.client = client
        self.tools = tools
        self.instructions = instructions
        self.history = history
        self.context_providers: tuple[ContextProvider, ...] = tuple(context_providers)
        self.approver = approver
        self.max_steps = max_steps
        self.id = id if id is not None else f"agent-{uuid.uuid4().hex[:12]}"
        self.eager_tools = eager_tools
        self.concurrency = concurrency
        self.max_result_chars = max_result_chars
        self.approval_timeout = approval_timeout
        self.reset_tool_choice = reset_tool_choice
        # Its history's loads and saves when that history cannot be shared by reference
        # (see _access_of); turns may run on several threads' loops.
        self._history_access = _HistoryAccess()
        self._turns: set[_Turn] = set()  # turns running (not yet ended nor stopped)
        self._executor()  # validates the tool table (duplicate names, concurrency) up front

    @property
    def client(self) -> ChatClient:
        """The client of the agent's LLM calls; assign another to use it from the next
        turn on."""
        return self._client

    @client.setter
    def client(self, client: ChatClient) -> None:
        if not callable(getattr(client, "stream", None)) or isinstance(client, type):
            raise TypeError(
                "an agent's client has a stream(messages, tools) method, as "
                'OpenAIChatClient(base_url, api_key=..., model="gpt-4o") has, '
                f"not {_what(client)}"
            )
        self._client = client

    @property
    def history(self) -> HistoryProvider | None:
        """Where turns are loaded from and saved (``None``: nowhere)."""
        return self._history

    @history.setter
    def history(self, history: HistoryProvider | None) -> None:
        methods = [getattr(history, name, None) for name in ("load", "save")]
        if history is not None and (isinstance(history, type) or not all(map(callable, methods))):
            raise TypeError(
                "an agent's history has load() and save() methods, as "
                "InMemoryHistoryProvider(messages) has (it keeps a list of messages), "
                f"not {_what(history)}"
            )
        self._history = history

    @property
    def approver(self) -> Approver | None:
        """Answers the approval requests of the agent's turns; see the constructor."""
        return self._approver

    @approver.setter
    def approver(self, approver: Approver | None) -> None:
        check_approver(approver)
        self._approver = approver

    @property
    def tools(self) -> tuple[Tool | ServerTool, ...]:
        """The tools offered: each a :class:`Tool` (functions given are made tools)
        or a :data:`ServerTool` mapping; assign any iterable the constructor takes."""
        return self._tools

    @tools.setter
    def tools(self, tools: Iterable[Tool | Callable[..., Any] | ServerTool]) -> None:
        if isinstance(tools, Mapping) or not isinstance(tools, Iterable):  # (a bare Tool too)
            raise TypeError(
                f"an agent's tools are a list (tools=[...]), not one {type(tools).__name__}"
            )
        offered = tuple(_offered(t) for t in tools)
        tool_table(t for t in offered if not isinstance(t, Mapping))  # (two of a name: refused)
        self._tools = offered

    def _executor(
        self, closed: set[str] | None = None, approver: Approver | None = None
    ) -> Operator[AgentResponseResult, AgentResponseResult]:
        """``execute_tools`` over the agent's tools as they are now and ``approver``
        (a turn's: the agent's as it was at its LLM call's start), the approval requests
        of the turn's earlier LLM calls ``closed`` (answers to them that come late never
        approve a call that reuses the id)."""
        return execute_tools(
            [t for t in self.tools if not isinstance(t, Mapping)],
            approver,
            concurrency=self.concurrency,
            max_result_chars=self.max_result_chars,
            approval_timeout=self.approval_timeout,
            closed=closed,
        )

    def __repr__(self) -> str:
        tools = ", ".join(_tool_name(t) for t in self.tools)
        return (
            f"Agent(id={self.id!r}, client={type(self.client).__name__}, tools=[{tools}], "
            f"max_steps={self.max_steps})"
        )

    def run(
        self,
        message_or_messages: str | ChatMessage | Sequence[ChatMessage],
        *,
        timeout: float | None = None,
    ) -> Observable[AgentResponseResult]:
        """One turn, as the results of all its LLM calls and tool runs.

        Cold: each subscription (from code running in an asyncio loop) runs
        the turn once. The turn loads history, builds the messages
        (instructions, context, history, then the new input marked
        ``EXTERNAL``) and calls the model; while it calls tools, their
        results are sent back in another call. Every result is forwarded as
        it comes, so each LLM call shows as a ``ResponseStartedEvent`` ...
        ``FinishEvent``, followed by its tools' results. After the model
        answers without tool calls (or a tool that ends the turn,
        ``@tool(ends_turn=True)``, returned a result), the new input and the
        turn's transcript are saved to history, then the observable
        completes: start the next turn on completion (or after awaiting
        :meth:`send`), not on the last ``FinishEvent``, which comes before the
        save. Disposal cancels the running request and tools at once (no
        tool starts and no approver is asked after it); a save already begun
        runs on to its end (the agent's next turn waits for it), so history
        never keeps a call without its result.

        An Anthropic call that stops with ``pause_turn`` (the server paused a
        long turn of its own tools) is sent back as it came, for the model to
        go on: another LLM call of the turn.

        Errors: the client's errors end the turn (nothing is saved), as
        :class:`~rafrx.errors.RafrxError` (another library's error, from a
        client wrapping its stream, caused by it: as the
        :class:`~rafrx.errors.HTTPStatusError` of the HTTP error status it
        carries, if any, else as a :class:`~rafrx.errors.TransportError`);
        :class:`~rafrx.errors.MaxStepsExceeded` after ``max_steps`` LLM calls
        that all called tools. Both carry ``.partial``. A turn that ends
        filtered (``FinishReason.CONTENT_FILTER``) or that the server ended
        with an error (``FinishReason.ERROR``: ``finish_reason: "error"``)
        completes, but is not saved either.

        ``timeout``: the seconds the turn may take to answer (loading history
        and context, every LLM call and tool run); past it the turn is stopped
        as by disposal, and ends with :class:`~rafrx.errors.TurnTimeout` (a
        ``TimeoutError``) carrying ``.partial``; nothing is saved. The save of a
        turn that answered in time is not cut. An ``asyncio.timeout`` around
        :meth:`send` cancels the turn instead: what arrived is lost.
        """
        new_input = _as_input(message_or_messages)
        _check_timeout(timeout)

        def subscribe(
            observer: abc.ObserverBase[AgentResponseResult],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                observer.on_error(RuntimeError("subscribe to Agent.run() from a running loop"))
                return Disposable()
            for stranded in [t for t in tuple(self._turns) if t.event_loop.is_closed()]:
                self._turns.discard(stranded)  # (in place: other threads' turns use the set)
            turn = _Turn(self, new_input, observer, loop, timeout)
            if asyncio.current_task(loop) in _LOOP_ENDING:
                # (started by the observer of a turn its loop's end cancelled: asyncio.run
                # cancels only the tasks there were, then closes the loop, so a task made
                # now would be left pending there)
                turn.end_with_the_loop("the turn was not started: its event loop is ending")
                return Disposable()
            if not _serve(turn.approver, turn):
                observer.on_error(_approver_busy())
                return Disposable()
            task = loop.create_task(turn.run(), name="rafrx turn")
            for lost in [t for t in tuple(_RUNNING) if t.get_loop().is_closed()]:
                _RUNNING.discard(lost)  # (its loop closed: it can never run again)
            _RUNNING.add(task)
            task.add_done_callback(_RUNNING.discard)
            self._turns.add(turn)
            return Disposable(lambda: _stop(turn, task))

        return Observable(subscribe)

    async def send(
        self,
        message_or_messages: str | ChatMessage | Sequence[ChatMessage],
        *,
        timeout: float | None = None,
    ) -> AgentResponse:
        """Run a turn and await its :class:`~rafrx.AgentResponse`.

        Cancelling the awaiting task cancels the turn. ``timeout`` (seconds) limits
        the turn as in :meth:`run`: past it, :class:`~rafrx.errors.TurnTimeout` is
        raised with ``.partial``, what the turn had received and run.
        """
        # (timeout given only when set: a run() overridden or wrapped with the one argument
        # it had serves send() as before)
        limit = {} if timeout is None else {"timeout": timeout}
        results = self.run(message_or_messages, **limit)
        return await collect_agent_response(results, agent_id=self.id)


def _check_timeout(timeout: float | None) -> None:
    """Refuse a turn's ``timeout`` that is not a positive number of seconds (or ``None``)."""
    if timeout is not None and not timeout > 0:  # (NaN too)
        raise ValueError(f"a turn's timeout is a positive number of seconds, got {timeout!r}")


def _turn_enders(tools: Iterable[Tool | ServerTool]) -> frozenset[str]:
    """The names of the tools whose result ends the turn (``ends_turn``)."""
    return frozenset(t.name for t in tools if isinstance(t, Tool) and t.ends_turn)


def _ended_by_a_tool(step: AgentResponse, enders: frozenset[str], ran: set[str]) -> bool:
    """Whether a call of the step to a tool of ``enders`` ran here (not one of the calls
    ``ran`` by the provider) and returned a result, not an error.

    Example:
        >>> from rafrx.messages import ToolCall
        >>> step = AgentResponse(tool_calls=[ToolCall("c1", "done", {})],
        ...     tool_messages=[ChatMessage.tool("ok", "c1")])
        >>> _ended_by_a_tool(step, frozenset({"done"}), set())
        True
        >>> failed = AgentResponse(tool_calls=step.tool_calls,
        ...     tool_messages=[ChatMessage.tool("Error: boom", "c1", is_error=True)])
        >>> _ended_by_a_tool(failed, frozenset({"done"}), set())
        False
    """
    if not enders:
        return False
    names = {call.id: call.name for call in step.tool_calls if call.id not in ran}
    return any(
        not message.is_error and names.get(message.tool_call_id or "") in enders
        for message in step.tool_messages
    )


def _goes_on(step: AgentResponse) -> bool:
    """Whether the server goes on with the turn once the step's messages go back: it
    paused the turn (Anthropic's ``pause_turn``), or the approver answered its own
    tools' approval requests (the Responses API's remote MCP tools)."""
    transcript = step.turn_transcript
    return bool(transcript) and (
        is_paused(transcript[-1]) or any(answers_approvals(m) for m in transcript)
    )


_Entries: TypeAlias = dict[Future[None], asyncio.AbstractEventLoop]

#: The turns running with each observable approver, of any agent: it serves one at a time.
#: Weak: a turn stranded on a closed loop (which never ends, so never leaves) is not kept.
_SERVED: weakref.WeakKeyDictionary[Observable[Any], weakref.WeakSet[_Turn]] = (
    weakref.WeakKeyDictionary()
)
_SERVED_LOCK = threading.Lock()


def _serve(approver: Approver | None, turn: _Turn) -> bool:
    """Count ``turn`` as ``approver``'s, if that is an observable; False, and not
    counted, if it serves a running turn already, of any agent."""
    if not isinstance(approver, Observable):
        return True
    with _SERVED_LOCK:
        serving = _SERVED.setdefault(approver, weakref.WeakSet())
        for stranded in [t for t in serving if t.event_loop.is_closed()]:
            serving.discard(stranded)  # (its loop closed: it will never end)
        if serving:
            return False
        serving.add(turn)
    return True


def _unserve(approver: Approver | None, turn: _Turn) -> None:
    """No longer count ``turn`` as ``approver``'s."""
    if isinstance(approver, Observable):
        with _SERVED_LOCK:
            serving = _SERVED.get(approver)
            if serving is not None:
                serving.discard(turn)


def _approver_busy() -> RuntimeError:
    return RuntimeError(
        "a turn (of this agent or another) is running with this approver: an observable "
        "of answers, matched to calls by id, serves one at a time; start the next turn "
        "when that one ends, or give each agent an approver of its own"
    )


#: Each history provider's access, shared by every agent on it: by the provider's id,
#: while it lives (a provider may be unhashable, or equal to another one).
_ACCESS: dict[int, _HistoryAccess] = {}
_ACCESS_LOCK = threading.Lock()


def _access_of(history: HistoryProvider | None, own: _HistoryAccess) -> _HistoryAccess:
    """The access every agent on ``history`` shares; ``own`` (the agent's) for a provider
    that has no weak reference (whose end could not free its entry)."""
    if history is None:
        return own
    key = id(history)
    with _ACCESS_LOCK:
        access = _ACCESS.get(key)
        if access is None:
            try:
                weakref.finalize(history, _ACCESS.pop, key, None)
            except TypeError:
                return own
            access = _ACCESS[key] = _HistoryAccess()
        return access


class _HistoryAccess:
    """The loads and saves of one history, by the turns of every agent on it (a handoff
    between agents over one history), from turns on any thread's loop.

    A load waits for the saves running, a save for the loads and saves
    running: no turn reads a half-saved history (it would think a call's
    result lost), and two saves never interleave. A save runs to its end even
    when its turn is stopped meanwhile: one cut short could keep a tool call
    without its result, which every later request on that history would be
    refused for; a failure no one is left to hear is logged.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # (another thread's turn may check and enter at once)
        # The loads and saves running, each with its loop: one left on a loop that was
        # closed will never end, and no longer counts.
        self.saving: _Entries = {}
        self.loading: _Entries = {}

    async def load(self, load: Callable[[], Any]) -> Any:
        """``load()`` (awaited if it is awaitable) once no save runs."""
        entry = await self._enter(self.loading, self.saving)
        try:
            return await _result(load())
        finally:
            self._leave(self.loading, entry)

    async def save(self, save: Callable[[], Any]) -> None:
        """``save()`` (awaited if awaitable) once no load or save runs, to its end whatever
        happens here."""
        entry = await self._enter(self.saving, self.saving, self.loading)
        try:
            saving = asyncio.ensure_future(_result(save()))
        except BaseException:
            self._leave(self.saving, entry)
            raise
        saving.add_done_callback(lambda _: self._leave(self.saving, entry))
        try:
            await asyncio.shield(saving)
        except asyncio.CancelledError:
            saving.add_done_callback(_log_failed_save)
            raise

    async def _enter(self, into: _Entries, *after: _Entries) -> Future[None]:
        """Wait until none of ``after`` runs, then be in ``into`` (checked and entered at once)."""
        while True:
            with self._lock:
                for entries in after:  # (stranded on a closed loop: never ending)
                    for stranded in [e for e, loop in entries.items() if loop.is_closed()]:
                        del entries[stranded]
                running = [entry for entries in after for entry in entries]
                if not running:
                    entry: Future[None] = Future()
                    into[entry] = asyncio.get_running_loop()
                    return entry
            # (with a timeout: an entry whose loop is closed meanwhile will never end)
            await asyncio.wait([asyncio.wrap_future(entry) for entry in running], timeout=0.5)

    def _leave(self, into: _Entries, entry: Future[None]) -> None:
        with self._lock:
            into.pop(entry, None)
        entry.set_result(None)


def _log_failed_save(saving: asyncio.Future[None]) -> None:
    if not saving.cancelled() and saving.exception() is not None:
        logger.error("saving a stopped turn's history failed", exc_info=saving.exception())


def _client_error(error: Exception) -> RafrxError:
    """A client's error as a :class:`~rafrx.errors.RafrxError`, which carries the turn's
    ``.partial``. One of another library (a client wrapping its stream) is caused by
    it: an :class:`~rafrx.errors.HTTPStatusError` of the HTTP error status it carries
    (an SDK's status error, ``httpx.HTTPStatusError``: see :func:`_http_status`), as
    rafrx's clients raise for that status; else a :class:`~rafrx.errors.TransportError`.

    Example:
        >>> _client_error(ConnectionResetError("peer reset"))
        TransportError('the client failed: ConnectionResetError: peer reset')
    """
    if isinstance(error, RafrxError):
        return error
    said = f"the client failed: {type(error).__name__}: {error_text(error)}"
    status = _http_status(error)
    failed: RafrxError
    if status is None:
        failed = TransportError(said, retryable=False)
    else:
        headers = _foreign_headers(error)
        failed = HTTPStatusError(
            status,
            message=f"HTTP {status}: {said}",
            retry_after=parse_retry_after(headers),
            request_id=request_id(headers),
        )
    failed.__cause__ = error
    return failed


def _http_status(error: Exception) -> int | None:
    """The HTTP error status (400-599) another library's error carries, read as the
    libraries keep it: ``status_code`` (an SDK's status error), ``status``
    (aiohttp's), or either on its ``response`` (``httpx.HTTPStatusError``).

    Example:
        >>> class SDKError(Exception):
        ...     status_code = 429
        >>> _http_status(SDKError("slow down")), _http_status(ValueError("no status"))
        (429, None)
    """
    for holder in (error, _attribute(error, "response")):
        for name in ("status_code", "status"):
            status = _attribute(holder, name)
            if isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 600:
                return int(status)  # (an IntEnum's value: HTTPStatus.TOO_MANY_REQUESTS)
    return None


def _foreign_headers(error: Exception) -> dict[str, str]:
    """The response headers another library's error carries (its ``headers``, or its
    ``response``'s), names in lower case; none when it has no mapping of them."""
    for holder in (error, _attribute(error, "response")):
        headers = _attribute(holder, "headers")
        if isinstance(headers, Mapping):
            try:
                return {str(k).lower(): str(v) for k, v in headers.items()}
            except Exception:  # (a mapping of another library's: it may fail)
                return {}
    return {}


def _attribute(holder: Any, name: str) -> Any:
    """``holder.name``, or ``None`` when it has none or reading it raises (httpx's
    ``request`` of an error made without one raises ``RuntimeError``)."""
    if holder is None:
        return None
    try:
        return getattr(holder, name, None)
    except Exception:
        return None


def _takes_tool_choice(stream: Callable[..., Any]) -> bool:
    """Whether a client's ``stream`` takes ``tool_choice`` (rafrx's take any body field).

    Example:
        >>> _takes_tool_choice(lambda messages, tools=None, **params: None)
        True
        >>> _takes_tool_choice(lambda messages, tools=None: None)
        False
    """
    try:
        parameters = inspect.signature(stream).parameters.values()
    except (TypeError, ValueError):  # (no signature to read: send only what it declares)
        return False
    return any(p.kind is p.VAR_KEYWORD or p.name == "tool_choice" for p in parameters)


def _unforced(choice: Any) -> Any:
    """The ``tool_choice`` that lets the model answer, for one forcing a tool call;
    ``None`` for one that does not. OpenAI's ``"required"`` (Mistral's ``"any"``) or a
    named tool become
    ``"auto"``, its ``allowed_tools`` go in ``auto`` mode; Anthropic's ``any`` or a
    named tool become its ``auto`` (keeping ``disable_parallel_tool_use``).

    Example:
        >>> _unforced("required"), _unforced({"type": "tool", "name": "f"})
        ('auto', {'type': 'auto'})
        >>> _unforced("auto"), _unforced({"type": "auto"}), _unforced(None)
        (None, None, None)
    """
    if choice in ("required", "any"):  # ("any": Mistral's)
        return "auto"
    if not isinstance(choice, Mapping) or choice.get("type") in ("auto", "none", None):
        return None
    kind = choice["type"]
    if kind in ("any", "tool"):
        keep = {k: v for k, v in choice.items() if k == "disable_parallel_tool_use"}
        return {"type": "auto", **keep}
    if kind == "allowed_tools":
        inner = choice.get("allowed_tools")  # (chat nests them; the Responses API does not)
        if isinstance(inner, Mapping):
            forced = inner.get("mode") == "required"
            return {**choice, "allowed_tools": {**inner, "mode": "auto"}} if forced else None
        return {**choice, "mode": "auto"} if choice.get("mode") == "required" else None
    return "auto"  # a named tool of OpenAI's: a function, a custom or a hosted tool


def _aborted(cause: BaseException) -> RuntimeError:
    """The error a turn ends with when a ``BaseException`` that is not an
    ``Exception`` (nor an exit or a cancellation) is raised in it."""
    error = RuntimeError(f"the turn was aborted by {type(cause).__name__}: {cause}")
    error.__cause__ = cause
    return error


def _stop(turn: _Turn, task: asyncio.Task[None]) -> None:
    """Stop a turn at once: its current step's request and tools first (nothing more
    starts, no approver is asked), then the task (which wakes later)."""
    turn.stop()
    loop = task.get_loop()
    if loop.is_closed():  # (the task can never run again: let it go)
        _RUNNING.discard(task)
        return
    call_on(loop, task.cancel)  # (disposing may come from another thread)


class _Turn:
    """One subscription of :meth:`Agent.run`."""

    def __init__(
        self,
        agent: Agent,
        new_input: tuple[ChatMessage, ...],
        observer: abc.ObserverBase[AgentResponseResult],
        loop: asyncio.AbstractEventLoop,
        timeout: float | None = None,
    ) -> None:
        self.agent = agent
        self.event_loop = loop
        self.timeout = timeout  # (seconds to answer in: see Agent.run)
        self.new_input = new_input
        self.observer = observer
        self.turn = ResponseAggregator(agent.id)
        self.stopped = False
        self.current: abc.DisposableBase | None = None  # the running step's subscription
        self.closed_requests: set[str] = set()  # approval requests answered (execute_tools)
        # The history it loads is the one it saves to (agent.history assigned meanwhile: the
        # next turn's), through the access every agent on that history shares.
        self.history = agent.history
        self.history_access = _access_of(agent.history, agent._history_access)
        # The approver of its LLM calls (an observable one: counted as serving this turn).
        self.approver = agent.approver

    def follow_approver(self) -> None:
        """Take the agent's approver as it is now for the next LLM call (one assigned
        meanwhile), counted as serving this turn instead of the one before; a
        ``RuntimeError`` if that observable serves another running turn."""
        approver = self.agent.approver
        if approver is self.approver:
            return
        if not _serve(approver, self):
            raise _approver_busy()
        _unserve(self.approver, self)
        self.approver = approver

    def leave(self) -> None:
        """No longer count this turn as running (it ended, or was stopped)."""
        self.agent._turns.discard(self)
        _unserve(self.approver, self)

    def stop(self) -> None:
        """Dispose of the running step now; nothing is forwarded after this."""
        self.stopped = True
        self.leave()
        current = self.current  # (read once: the step may end meanwhile, on the loop's thread)
        if current is not None:
            current.dispose()

    async def run(self) -> None:
        try:
            await self.loop()
        except asyncio.CancelledError as cancelled:
            task = asyncio.current_task()
            if self.stopped or task is None or task.cancelling():
                del cancelled, task  # (this frame is in its traceback: no cycle)
                if not self.stopped:  # not disposed: its loop is ending (asyncio.run returned)
                    self.end_with_the_loop("the turn was cancelled (its event loop ended?)")
                raise
            # Raised by the turn's own code (a provider, a client's on_error), its task not
            # cancelled: that code failed, and the turn with it.
            said = error_text(cancelled) or "no message"
            failed = TransportError(
                f"the turn failed: a CancelledError ({said}) was raised by its client or "
                "a history or context provider, while the turn itself was not cancelled",
                retryable=False,
            )
            failed.__cause__ = cancelled
            failed.partial = self.turn.failed(failed)
            self.terminate(self.observer.on_error, let_go(failed))
            del failed, cancelled  # this frame is in their tracebacks: no cycle
        except (KeyboardInterrupt, SystemExit):
            raise  # the program stops
        except BaseException as exc:  # any other (GreenletExit …) still ends the turn
            if isinstance(exc, GeneratorExit) and self.event_loop.is_closed():
                raise  # closed, stranded on a loop closed without it: nobody is left to tell
            error = exc if isinstance(exc, Exception) else _aborted(exc)
            if isinstance(error, RafrxError) and error.partial is None:
                error.partial = self.turn.failed(error)
            if isinstance(error, RafrxError):  # (kept by the user: the turn goes with it)
                let_go(error)
            self.terminate(self.observer.on_error, error)
            del error  # this frame is in its traceback: no cycle
        else:
            self.terminate(self.observer.on_completed)
        finally:
            self.leave()

    def end_with_the_loop(self, said: str) -> None:
        """End the turn with the error ``said``: its event loop is ending. Turns its
        observer starts meanwhile (on this task) end so too, never started."""
        ended = TransportError(said, retryable=False)
        ended.partial = self.turn.failed(ended)
        task = asyncio.current_task(self.event_loop)
        if task is not None:
            _LOOP_ENDING.add(task)
        try:
            self.terminate(self.observer.on_error, ended)
        finally:
            if task is not None:
                _LOOP_ENDING.discard(task)

    def terminate(self, call: Callable[..., None], *args: Any) -> None:
        """Call a terminal method (the turn has ended: the next may start in it); an
        exception it raises goes to the loop's handler."""
        self.leave()
        try:
            call(*args)
        except Exception as exc:  # e.g. reactivex's default on_error re-raising
            asyncio.get_running_loop().call_exception_handler(
                {"message": "rafrx.Agent: an observer raised", "exception": exc}
            )

    async def messages(self) -> list[ChatMessage]:
        agent = self.agent
        history: list[ChatMessage] = []
        if self.history is not None:
            loaded = await self.history_access.load(self.history.load)
            loaded = _messages_from(self.history, "load()", loaded)
            repaired = _paired_before(loaded, self.new_input)
            history = [m.with_source(MessageSource.CHAT_HISTORY) for m in repaired]
        context: list[ChatMessage] = []
        for provider in agent.context_providers:
            given = await _result(provider.provide((*history, *self.new_input)))
            given = _messages_from(provider, "provide()", given)
            context.extend(m.with_source(MessageSource.CONTEXT_PROVIDER) for m in given)
        head = [] if agent.instructions is None else [ChatMessage.system(agent.instructions)]
        return [*head, *context, *history, *self.new_input]

    async def loop(self) -> None:
        await self.in_time(self.answer())
        await self.save()

    async def in_time(self, answering: Coroutine[Any, Any, None]) -> None:
        """Await ``answering`` within the turn's timeout; past it, the awaiting is
        cancelled (the running step disposed) and :class:`TurnTimeout` raised."""
        if self.timeout is None:
            return await answering
        deadline = asyncio.timeout(self.timeout)
        try:
            async with deadline:
                await answering
        except TimeoutError:
            if not deadline.expired():
                raise  # (a TimeoutError of the turn's own code)
            raise TurnTimeout(
                f"the turn took longer than its timeout ({self.timeout:g} s)"
            ) from None

    async def answer(self) -> None:
        """The LLM calls and tool runs of the turn, until the model answers (or a tool
        that ends the turn returned a result)."""
        agent = self.agent
        conversation = await self.messages()
        calling = used_tools = False
        for _ in range(agent.max_steps):
            self.check_stopped()
            self.follow_approver()
            enders = _turn_enders(agent.tools)
            step, ran = await self.step(conversation, self.unforced() if used_tools else {})
            self.check_stopped()  # (a client that emits at once: no await let it land)
            calling = any(call.complete and call.id not in ran for call in step.tool_calls)
            used_tools = used_tools or calling
            if not calling and not _goes_on(step):
                break  # (a call cut short never ran: nothing for the model to read)
            if calling and _ended_by_a_tool(step, enders, ran):
                break  # (its result is the turn's last message)
            conversation.extend(step.turn_transcript)  # (paused: it goes on from there)
        else:
            doing = (
                "the model was still calling tools"
                if calling
                else "the server had not ended the turn"
            )
            raise MaxStepsExceeded(
                f"{doing} after {agent.max_steps} LLM calls (max_steps={agent.max_steps})"
            )

    async def save(self) -> None:
        """Save the turn's new input and transcript to the history it loaded, if any,
        unless the provider refused or filtered its answer or ended it with an error."""
        if self.history is None:
            return
        response = self.turn.response()
        if response.finish_reason is FinishReason.CONTENT_FILTER:
            # Anthropic: "you must reset the conversation context" after a refusal, or
            # the next turns are refused too; a filtered answer is no use to go on from.
            logger.warning("a turn the provider refused or filtered was not saved to history")
            return
        if response.finish_reason is FinishReason.ERROR:
            # A server that ends the stream with finish_reason "error" ("abort" in vLLM):
            # the answer broke off, as after an in-band error event, whose turn is not saved.
            logger.warning("a turn the server ended with an error was not saved to history")
            return
        messages = [*self.new_input, *response.turn_transcript]
        await self.history_access.save(functools.partial(self.history.save, messages))

    def check_stopped(self) -> None:
        """Raise ``CancelledError`` if the turn was stopped (disposed): nothing more runs."""
        if self.stopped:
            raise asyncio.CancelledError

    def unforced(self) -> dict[str, Any]:
        """The body fields of a call after the turn used tools (see ``reset_tool_choice``)."""
        agent = self.agent
        params = getattr(agent.client, "params", None)
        if not agent.reset_tool_choice or not isinstance(params, Mapping):
            return {}
        if not _takes_tool_choice(agent.client.stream):  # (a ChatClient of the protocol alone)
            return {}
        choice = _unforced(params.get("tool_choice"))
        return {} if choice is None else {"tool_choice": choice}

    async def step(
        self, messages: Sequence[ChatMessage], params: Mapping[str, Any]
    ) -> tuple[AgentResponse, set[str]]:
        """One LLM call (with these body ``params``, if any) and its tool runs; every
        result is forwarded downstream. Also returned: the ids of the calls the provider
        ran itself (reported by :class:`~rafrx.updates.ToolCalled`), whose results the
        model has already read."""
        agent = self.agent
        done: Outcome[None] = Outcome()
        step = ResponseAggregator(agent.id)

        def on_next(result: AgentResponseResult) -> None:
            if done.done() or self.stopped:
                return
            step.step(result)
            self.turn.step(result)
            try:
                self.observer.on_next(result)
            except Exception as exc:  # a downstream callback failed: end the turn with it
                done.set_exception(exc)

        stream: Callable[..., Observable[Update]] = agent.client.stream  # (params: rafrx's)
        ran: set[str] = set()

        def note(update: Update) -> None:
            if type(update) is ToolCalled:
                ran.add(update.id)

        try:
            source = stream(tuple(messages), agent.tools or None, **params)
        except Exception as exc:  # (a RafrxError as it is; another caused by it)
            raise _client_error(exc)  # noqa: B904
        source = source.pipe(
            rx_ops.catch(lambda exc, _: reactivex.throw(_client_error(exc))),
            rx_ops.do_action(note),
        )
        results = source.pipe(
            convert(eager=agent.eager_tools), agent._executor(self.closed_requests, self.approver)
        )
        # Held before subscribing: a client that emits at once may be disposed meanwhile.
        self.current = subscription = SingleAssignmentDisposable()
        subscription.disposable = results.subscribe(
            on_next, done.set_exception, lambda: done.set_result(None)
        )
        try:
            await done.wait()
        finally:
            self.current = None
            subscription.dispose()
        return step.response(), ran
