"""The converter pipeline as composable ReactiveX operator factories.

Each factory returns an :data:`~rafrx.typing.Operator` for ``.pipe(...)``; state
lives per subscription, so a piped observable can be subscribed many times.
User operators slot in anywhere between them.

Example:
    >>> import reactivex
    >>> from rafrx import updates as u
    >>> from rafrx.response import FinishReason
    >>> stream = reactivex.from_iterable([
    ...     u.TextDelta("Let me check."),
    ...     u.ToolCallDelta(0, id="call_1", name="weather", arguments_delta='{"city": "Pa'),
    ...     u.ToolCallDelta(0, arguments_delta='ris"}'),
    ...     u.Finish(FinishReason.TOOL_CALLS),
    ... ])
    >>> response = stream.pipe(convert(), aggregate()).run()
    >>> response.text, response.tool_calls[0].arguments
    ('Let me check.', {'city': 'Paris'})
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

# The stages are imported here, once, not in each factory: an import statement run in
# a function costs about 3.7 µs a call (convert() and aggregate() ran three a stream,
# about 11 µs: an eighth of a two-event stream).
from rafrx.operators._accumulate_tool_calls import accumulate_tool_calls as _accumulate_operator
from rafrx.operators._aggregate import aggregate as _aggregate_operator
from rafrx.operators._convert import Converter
from rafrx.operators._execute_tools import execute_tools as _execute_tools_operator
from rafrx.operators._flush_tool_calls import flush_tool_calls as _flush_operator
from rafrx.operators._inputs import not_a_source
from rafrx.operators._parse_args_stream import parse_args_stream as _parse_operator
from rafrx.operators._reducer import reducer_operator
from rafrx.operators._split_legacy_delta import split_legacy_delta as _split_operator
from rafrx.typing import Operator

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from rafrx.operators._execute_tools import Approver
    from rafrx.response import AgentResponse, AgentResponseResult
    from rafrx.tools import Tool
    from rafrx.updates import AgentResponseUpdate, Update

__all__ = [
    "accumulate_tool_calls",
    "aggregate",
    "convert",
    "execute_tools",
    "flush_tool_calls",
    "parse_args_stream",
    "split_legacy_delta",
]


def split_legacy_delta() -> Operator[Update, AgentResponseUpdate]:
    """Split flat ``ToolCallDelta`` updates into ``ToolCallStart/Args/End``.

    Each wire index becomes one call: ``ToolCallStart`` as soon as it has a
    name (arguments that arrive earlier are held back until then), with the
    first non-empty id seen, else a generated one; a different non-empty id
    on a known index starts a new call, and so does a different name, or the
    same name again with arguments starting an object after a complete one
    (a provider sending every call whole at index 0 without ids), while an id
    that comes after a generated one continues the call. ``ToolCallArgs`` per
    non-empty delta; ``ToolCallEnd`` for every open call, in start order, just before
    ``Finish`` (or at completion). Other updates pass unchanged.

    .. marble::
        :text:

        -D(0,id=a,name=f,"{")--D(0,"}")--T("hi")--F-|
        [   split_legacy_delta()                     ]
        -(S(a,f),A(a,"{"))-----A(a,"}")--T("hi")--(E(a),F)-|

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> out = []
        >>> _ = reactivex.from_iterable([u.ToolCallDelta(0, name="f", arguments_delta="{}")]
        ...     ).pipe(split_legacy_delta()).subscribe(out.append)
        >>> [type(x).__name__ for x in out]
        ['ToolCallStart', 'ToolCallArgs', 'ToolCallEnd']
    """
    return _split_operator()


def accumulate_tool_calls(
    max_argument_chars: int = 64 * 1024 * 1024,
) -> Operator[Update, AgentResponseResult]:
    """Turn updates into :class:`~rafrx.AgentResponseResult` chunks, one per update.

    Tracks each tool call by ``call_id`` (parallel and interleaved calls stay
    apart; duplicate starts are dropped). An LLM call begins with the first
    update, and with the first update after a ``Finish``: its first result
    carries ``ResponseStartedEvent``, the ``Finish`` result ``FinishEvent``.
    ``id``/``model`` come from ``ResponseMetadata`` updates. An ``Error``
    update, or an upstream error, gives one result holding ``ErrorContent``
    and then the error. Arguments past ``max_argument_chars`` fail the stream
    with :class:`~rafrx.errors.LimitExceeded`.

    .. marble::
        :text:

        -M(id)--T("a")--S(c,f)--A(c,"{}")--E(c)--F-|
        [   accumulate_tool_calls()                 ]
        -r1-----r2------r3------r4---------r5----r6-|
        r1: events=(ResponseStartedEvent,)   r6: events=(FinishEvent,)

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> out = []
        >>> _ = reactivex.of(u.TextDelta("Hi")).pipe(accumulate_tool_calls()).subscribe(out.append)
        >>> out[0].contents, type(out[0].events[0]).__name__
        ((TextContent(text='Hi'),), 'ResponseStartedEvent')
    """
    not_a_source(max_argument_chars, "accumulate_tool_calls")
    return _accumulate_operator(max_argument_chars)


def parse_args_stream() -> Operator[AgentResponseResult, AgentResponseResult]:
    """Parse tool-call arguments while they stream.

    After each ``ToolCallArgsContent`` (in the same result) come one
    ``ToolCallArgsProgressContent`` while a top-level string value grows and
    one ``ToolCallArgsParsedContent`` the moment a top-level member is
    complete (its value equals ``json.loads(arguments)[name]``). The work is
    linear in the argument size; invalid JSON stops the events for that call
    without an exception. A parsable prefix never ends a call.

    .. marble::
        :text:

        -A(c,'{"path": "a.')----A(c,'py", "n": 1}')-----------|
        [   parse_args_stream()                                 ]
        -(A,Progress(path,"a."))-(A,Progress(path,"py"),Parsed(path),Parsed(n))-|

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> out = []
        >>> _ = reactivex.from_iterable([u.ToolCallStart("c", "f"), u.ToolCallArgs("c", '{"n": 1}')]
        ...     ).pipe(accumulate_tool_calls(), parse_args_stream()).subscribe(out.append)
        >>> out[-1].contents[-1]
        ToolCallArgsParsedContent(call_id='c', name='n', value=1)
    """
    return _parse_operator()


def flush_tool_calls(eager: bool = False) -> Operator[AgentResponseResult, AgentResponseResult]:
    """Emit one ``ToolCallingContent`` per ended call, parsed and ready to run.

    By default they come in start order, in one result after the last
    upstream item; with ``eager=True`` each comes right after its
    ``ToolCallEndContent`` (so tools can start while the model streams the
    next call). ``""`` arguments become ``{}``; invalid JSON sets ``error``
    and keeps ``raw_arguments``.

    A call cut short is never flushed to run: one whose arguments never
    ended (the stream completed or failed first), or whose invalid
    arguments came with a ``LENGTH`` finish (the token limit cut them),
    becomes one ``ToolCallIncompleteContent`` instead, at the end or just
    before an ``ErrorContent``; eagerly, a call whose arguments do not parse
    waits for its LLM call's finish to tell which it is. A failing stream
    flushes no call to run: an ended call not flushed yet becomes a
    ``ToolCallIncompleteContent`` too, marked ``whole`` when its arguments are
    (``aggregate()`` keeps it as a complete call). A call flushed upstream
    already (as ``convert()`` does) is not flushed again: applied twice, it
    still hands each call to ``execute_tools`` once.

    .. marble::
        :text:

        -S(a)--A(a)--E(a)--F--|
        [ flush_tool_calls()   ]
        -S(a)--A(a)--E(a)--F--Calling(a)-|

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> out = []
        >>> _ = reactivex.from_iterable([u.ToolCallStart("c", "f"), u.ToolCallEnd("c")]
        ...     ).pipe(accumulate_tool_calls(), flush_tool_calls()).subscribe(out.append)
        >>> out[-1].contents
        (ToolCallingContent(call_id='c', name='f', arguments={}, raw_arguments='', error=None),)
    """
    not_a_source(eager, "flush_tool_calls")
    return _flush_operator(eager)


def convert(
    eager: bool = False, max_argument_chars: int = 64 * 1024 * 1024
) -> Operator[Update, AgentResponseResult]:
    """The four converter operators composed, for one LLM call.

    ``convert()`` behaves exactly like ``pipe(split_legacy_delta(),
    accumulate_tool_calls(), parse_args_stream(), flush_tool_calls())`` but
    runs the four stages as one reducer in one subscription (no observables
    in between), with fast paths for text and argument fragments: the
    per-chunk cost stays low.

    .. marble::
        :text:

        -T("Hi")--D(0,f,"{}")--F-|
        [        convert()        ]
        -r(Text)--r(Start)r(Args,Parsed?)--r(End)r(Finish)--r(Calling)-|

    Example:
        >>> import reactivex
        >>> from reactivex import operators as rx
        >>> from rafrx import updates as u
        >>> from rafrx.response import FinishReason
        >>> updates = reactivex.of(
        ...     u.ToolCallDelta(0, id="c1", name="now", arguments_delta='{"tz": "UTC"}'),
        ...     u.Finish(FinishReason.TOOL_CALLS))
        >>> results = updates.pipe(convert(), rx.to_list()).run()
        >>> [type(c).__name__ for r in results for c in r.contents]
        ... # doctest: +NORMALIZE_WHITESPACE
        ['ToolCallStartContent', 'ToolCallArgsContent', 'ToolCallArgsProgressContent',
         'ToolCallArgsParsedContent', 'ToolCallEndContent', 'ToolCallingContent']
    """
    not_a_source(eager, "convert")
    return reducer_operator(functools.partial(Converter, eager, max_argument_chars))


def aggregate(agent_id: str | None = None) -> Operator[AgentResponseResult, AgentResponse]:
    """Fold result chunks into one :class:`~rafrx.AgentResponse` at completion.

    ``text`` is all assistant text in order; ``reasoning_text`` is ``None``
    when there was none; ``tool_calls`` come from ``ToolCallingContent``,
    ``tool_messages`` from ``ToolCalledContent``; ``turn_transcript`` holds,
    per LLM call, the assistant message (with its tool calls) and its tool
    messages in call start order, then the final assistant message (empty
    when the model's last answer was empty, so it is always there); usage is
    summed over LLM calls (the last report within a call counts). On an
    upstream :class:`~rafrx.errors.RafrxError` the same error is re-raised
    with ``.partial`` set to the response built so far.

    .. marble::
        :text:

        -r1--r2--r3--|
        [ aggregate() ]
        -------------R|

    Example:
        >>> import reactivex
        >>> from rafrx import updates as u
        >>> reactivex.of(u.TextDelta("Hi")).pipe(accumulate_tool_calls(), aggregate()).run().text
        'Hi'
    """
    not_a_source(agent_id, "aggregate")
    return _aggregate_operator(agent_id)


def execute_tools(
    tools: Iterable[Tool | Callable[..., Any]],
    approver: Approver | None = None,
    *,
    concurrency: int = 8,
    max_result_chars: int = 100_000,
    approval_timeout: float | None = None,
) -> Operator[AgentResponseResult, AgentResponseResult]:
    """Run each ``ToolCallingContent`` and emit its ``ToolCalledContent``.

    Every result passes through unchanged. Each call runs as an asyncio task
    on the running loop (at most ``concurrency`` at once; sync tools in a
    worker thread), and its ``ToolCalledContent`` comes in a result of its
    own as soon as it finishes: ``result`` holds the return value (a ``str``
    as is, anything else as JSON), ``error`` says what went wrong: unknown
    tool, unparsable or invalid arguments, the exception raised (type and
    message), a timeout, or a denied approval. Nothing fails the stream.
    A call the provider ran itself and said so (a ``ToolCalled`` update, whose
    ``ToolCalledContent`` comes upstream) is not run again; a call of no tool
    given here waits for the end of its LLM call before it fails as unknown,
    for such a report may come after it (with ``convert(eager=True)``).
    Results and errors longer than ``max_result_chars`` are cut, with a
    marker. A tool that requires approval first emits a result with a
    ``ToolApprovalRequestEvent``, then waits for ``approver``: an async or
    sync callable returning a bool (or a ``ToolApprovalResponse``), or an
    observable of ``ToolApprovalResponse`` (a ``Subject`` the UI answers:
    the first answer to a request counts, and once the observable ends every
    request still open is denied); with no approver the call is denied. Only
    ``True``, or a response to that very call with ``approved=True``,
    approves: anything else (``"no"``, ``1``, an answer to another call, an
    approver that raises) denies it, saying why. Give a hot ``Subject``:
    each subscription (an agent makes one per LLM call) takes the answers
    given from then on, where a ``ReplaySubject`` or a cold observable would
    replay old answers, which count for a later call with the same id. An
    answer naming its request (``ToolApprovalResponse(call_id, True,
    request=event)``) answers that request only: a late or duplicate one
    never approves a later call that reuses the id. The
    event holds a copy of the arguments. With ``approval_timeout`` (seconds),
    a request not answered in time is denied, saying so, and a later answer
    to it is ignored. The provider's own tools that ask approval (a
    ``ToolApprovalRequestEvent`` from upstream: the Responses API's remote MCP
    tools) are put to the approver the same way, and the answer comes as a
    ``ReasoningContent("", provider_data={"type": "mcp_approval_response",
    ...})`` that goes back with the assistant message (``approve`` false, with
    the reason, unless approved); with no approver they are left to the
    caller. Completion waits for every running tool; disposal cancels them.

    .. marble::
        :text:

        -r(Calling(a))--r(Calling(b))--|
        [        execute_tools([a, b])                    ]
        -r(Calling(a))--r(Calling(b))------r(Called(b))--r(Called(a))-|

    Example:
        >>> import asyncio, reactivex
        >>> from reactivex import operators as rx
        >>> from rafrx import ToolCallingContent, AgentResponseResult
        >>> from rafrx.tools import tool
        >>> @tool
        ... def add(a: int, b: int) -> int:
        ...     return a + b
        >>> calls = [ToolCallingContent("c1", "add", {"a": 2, "b": 3}),
        ...          ToolCallingContent("c2", "add", {"a": 2})]
        >>> async def main():
        ...     stream = reactivex.of(AgentResponseResult(contents=calls))
        ...     return await stream.pipe(execute_tools([add]), rx.to_list())
        >>> done = [r.contents[0] for r in asyncio.run(main())[1:]]  # in the order they finish
        >>> for content in sorted(done, key=lambda c: c.call_id):
        ...     print(content)
        ToolCalledContent(call_id='c1', result='5', error=None)
        ToolCalledContent(call_id='c2', result=None, error="invalid arguments for tool 'add': missing required argument 'b'")
    """  # noqa: E501
    not_a_source(tools, "execute_tools")
    return _execute_tools_operator(
        tools,
        approver,
        concurrency=concurrency,
        max_result_chars=max_result_chars,
        approval_timeout=approval_timeout,
    )
