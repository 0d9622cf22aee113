"""``convert()``: the four converter stages as one reducer, with fast paths.

:class:`Converter` runs :class:`LegacyDeltaSplitter`,
:class:`ToolCallAccumulator`, :class:`ArgsStreamParser` and
:class:`ToolCallFlusher` as a :class:`Chain`. Two kinds of update make up
nearly every chunk of a stream, and for them it calls the stages' own
narrow methods instead of stepping each stage, which gives the same result
with fewer intermediate objects:

* a text or reasoning delta: the splitter passes it, the argument parser and
  the flusher pass the result (it holds no tool-call content), so only the
  accumulator builds it, without its ``match``;
* an argument fragment of a call that is already open (a ``ToolCallArgs``,
  or a ``ToolCallDelta`` that only continues a started call): one result
  holding the ``ToolCallArgsContent`` and the Parsed / Progress contents
  that follow it, built once instead of once per stage. When the fragment
  only continues a string value (a file's content: nearly every fragment of
  a large argument), the parser's :meth:`~rafrx.json_stream.StreamingArgsParser.grow`
  consumes it and the Progress content is built right here, without the
  parser's callback and its list.

A call's start and its end (a ``ToolCallStart``, a ``ToolCallDelta`` that
names a call at a new wire index and brings no arguments, a ``ToolCallEnd`` of
an open call holding no half of a character, and each of the ends the splitter
emits before a ``Finish``) also take the stages' narrow methods: a start costs
a quarter fewer instructions than through the chain (about 50k instead of 70k
on ``chat/tools4-seq``), and it keeps the new call's state at once; a
``Finish`` ending four calls costs 137k instead of 189k. None of the stages
raises on a start or an end, so no result they make can be owed to an error.

Everything else goes through the chain. An argument fragment of an open call
is most of a tool-call stream, so a call's state in each stage (the
accumulator's :class:`OpenCall`, the call's streaming parser, the flusher's
kept fragments) is looked up once, at its start or its first fragment, and
kept in an :class:`_ArgumentRun`: the next fragments of that call cost one
dictionary lookup. Any update that goes through the chain may change that
state, so it drops every run; a start changes no other call's state, and an
end drops only the ended call's runs.

The flusher also notes the id and model of each result it passes, for the
results it flushes; results of the fast paths carry the accumulator's, which
change only with a ``ResponseMetadata`` update, through the chain, so the
flusher has already noted them.

The equivalence with the four operators piped apart is property-tested
(``tests/operators/test_convert.py``).

Example:
    >>> from rafrx import updates as u
    >>> c = Converter()
    >>> [type(x).__name__ for r in c.step(u.ToolCallStart("a", "f")) for x in r.contents]
    ['ToolCallStartContent']
    >>> [type(x).__name__ for r in c.step(u.ToolCallArgs("a", '{"k": 1}')) for x in r.contents]
    ['ToolCallArgsContent', 'ToolCallArgsParsedContent']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from rafrx import updates as u
from rafrx._fragments import COMPACT_AT, has_surrogates
from rafrx.content import Content, ResponseMetadata
from rafrx.json_stream import StreamingArgsParser
from rafrx.operators._accumulate_tool_calls import (
    DEFAULT_MAX_ARGUMENT_CHARS,
    OpenCall,
    ToolCallAccumulator,
)
from rafrx.operators._builders import agent_result, args_content, progress_content
from rafrx.operators._flush_tool_calls import KeptCall, ToolCallFlusher
from rafrx.operators._parse_args_stream import ArgsStreamParser
from rafrx.operators._reducer import Chain
from rafrx.operators._split_legacy_delta import LegacyDeltaSplitter
from rafrx.response import AgentResponseResult

__all__ = ["Converter"]

_ACCUMULATE = 1  # the accumulator's place in the chain (for Chain.raised)
_Key = TypeVar("_Key", str, int)


class _ArgumentRun:
    """An open call's state in every stage, for its next argument fragments."""

    __slots__ = ("call", "call_id", "kept", "limit", "meta", "parser")

    def __init__(
        self,
        call_id: str,
        call: OpenCall,
        parser: StreamingArgsParser[Content],
        kept: KeptCall | None,
        meta: ResponseMetadata,
        limit: int,
    ) -> None:
        self.call_id = call_id
        self.call = call
        self.parser = parser
        self.kept = kept
        self.meta = meta
        self.limit = limit

    def fragment(self, delta: str) -> tuple[AgentResponseResult] | None:
        """The result for ``delta``, as the stages would build it; None: not the usual case."""
        call = self.call
        size = call.size + len(delta)
        if (
            not delta
            or size > self.limit
            or call.high
            or (not delta.isascii() and has_surrogates(delta))  # (no call for plain ASCII)
        ):
            return None  # the stages themselves skip it, raise, or join an emoji's halves
        call.size = size
        meta = self.meta
        content = args_content(self.call_id, delta, meta)
        kept = self.kept
        if kept is not None:
            args = kept.args
            args.append(delta)
            if len(args) >= COMPACT_AT:
                kept.compact()
        grown = self.parser.grow(delta)  # the usual case: more of a string value
        if grown is None:
            contents = (content, *self.parser.feed(delta))
        else:
            name, received, text = grown
            contents = (content, progress_content(self.call_id, name, received, text, meta))
        return (agent_result(meta.id, meta.model, None, contents, ()),)


class Converter:
    """The reducer behind :func:`~rafrx.operators.convert` (see the module docstring)."""

    __slots__ = ("_accumulate", "_by_id", "_by_index", "_chain", "_flush", "_parse", "_split")

    def __init__(
        self, eager: bool = False, max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS
    ) -> None:
        self._split = LegacyDeltaSplitter()
        self._accumulate = ToolCallAccumulator(max_argument_chars)
        self._parse = ArgsStreamParser()
        self._flush = ToolCallFlusher(eager)
        self._chain: Chain[u.Update, AgentResponseResult] = Chain(
            self._split, self._accumulate, self._parse, self._flush
        )
        self._by_id: dict[str, _ArgumentRun] = {}  # ToolCallArgs runs, by call id
        self._by_index: dict[int, _ArgumentRun] = {}  # ToolCallDelta runs, by wire index

    def step(self, update: u.Update) -> Sequence[AgentResponseResult]:
        if type(update) is u.ToolCallDelta:
            run = self._by_index.get(update.index)
            if (
                run is not None
                and not update.name
                and (update.arguments_delta or not update.id or update.id == run.call_id)
            ):  # (arguments under another id: still the index's call, see LegacyDeltaSplitter)
                delta = update.arguments_delta
                return run.fragment(delta) or self._arguments(run.call_id, delta)
            call_id = self._split.continued_call(update)
            if call_id is not None:
                results = self._arguments(call_id, update.arguments_delta)
                self._keep_run(call_id, self._by_index, update.index)
                return results
            opened = self._split.opened_call(update)
            if opened is not None:
                return self._start(*opened, self._by_index, update.index)
        elif type(update) is u.ToolCallArgs:
            run = self._by_id.get(update.id)
            if run is not None:
                return run.fragment(update.args_delta) or self._arguments(
                    update.id, update.args_delta
                )
            results = self._arguments(update.id, update.args_delta)
            self._keep_run(update.id, self._by_id, update.id)
            return results
        elif type(update) is u.TextDelta:
            return (self._accumulate.text(update.delta),)
        elif type(update) is u.ReasoningDelta:
            if update.provider_data is not None:
                named = self._split.named_extra(update)
                if named is None:  # (held until its call starts)
                    return ()
                update = named
            return (self._accumulate.reasoning(update),)
        elif type(update) is u.ToolCallStart:
            return self._start(update.id, update.name, self._by_id, update.id)
        elif type(update) is u.ToolCallEnd:
            call = self._accumulate.open_call(update.id)
            if call is not None and not call.high:  # (else: nothing, or a held half to parse)
                self._drop_runs(update.id)
                return self._end(update.id, call)
        elif type(update) is u.Finish:
            return self._finish(update)
        return self._through_chain(update)

    def _arguments(self, call_id: str, args_delta: str) -> Sequence[AgentResponseResult]:
        try:
            content = self._accumulate.arguments(call_id, args_delta)
        except Exception:
            self._chain.raised(_ACCUMULATE)
            raise
        if content is None:
            return ()
        contents: list[Content] = [content]
        contents += self._parse.parse(content)
        self._flush.arguments(content)
        return (self._accumulate.result(tuple(contents)),)

    def _start(
        self, call_id: str, name: str, runs: dict[_Key, _ArgumentRun], key: _Key
    ) -> Sequence[AgentResponseResult]:
        """``ToolCallStart(call_id, name)``, as the stages would take it; the new call's
        state is kept for its fragments. The start of a call changes no other call's."""
        content = self._accumulate.start(call_id, name)
        if content is None:
            return ()  # a duplicate start
        result = self._accumulate.result((content,))  # (events: at most ResponseStarted)
        self._parse.start(content)
        self._flush.start(content)
        self._keep_run(call_id, runs, key)
        return (result,)

    def _end(self, call_id: str, call: OpenCall) -> Sequence[AgentResponseResult]:
        """``ToolCallEnd(call_id)`` of ``call``, open and holding no half of a character, as
        the stages would take it. The end of a call changes no other call's state: drop
        its runs first."""
        result = self._accumulate.result(self._accumulate.end(call_id, call))  # (no events)
        self._parse.end(call_id)
        calling = self._flush.end(call_id)
        if calling is None:
            return (result,)
        return (result, agent_result(result.id, result.model, None, (calling,), ()))

    def _finish(self, update: u.Finish) -> Sequence[AgentResponseResult]:
        """``update``: first the ends of the calls the splitter started (as :meth:`_end`
        takes them when it can), then the rest through the chain."""
        try:
            ended = self._split.end_calls()
        except Exception:
            self._chain.raised(0)
            raise
        if not ended:
            return self._through_chain(update)
        self._by_id.clear()  # (the calls end, the chain then takes the finish)
        self._by_index.clear()
        results: list[AgentResponseResult] = []
        for call_id in ended:
            call = self._accumulate.open_call(call_id)
            if call is not None and not call.high:
                results += self._end(call_id, call)
            else:  # (the splitter passes an end as it is)
                results += self._through_chain(u.ToolCallEnd(call_id))
        results += self._through_chain(update)
        return results

    def _through_chain(self, update: u.Update) -> Sequence[AgentResponseResult]:
        self._by_id.clear()  # the chain may change any call's state
        self._by_index.clear()
        return self._chain.step(update)

    def _drop_runs(self, call_id: str) -> None:
        """Forget the state kept for ``call_id``'s fragments."""
        self._by_id.pop(call_id, None)
        by_index = self._by_index
        for index, run in by_index.items():
            if run.call_id == call_id:
                del by_index[index]
                break  # (a call has one wire index)

    def _keep_run(self, call_id: str, runs: dict[_Key, _ArgumentRun], key: _Key) -> None:
        """After a fragment went through the stages: keep the call's state for the next ones."""
        call = self._accumulate.open_call(call_id)
        parser = self._parse.call(call_id)
        if call is not None and parser is not None:
            accumulate = self._accumulate
            parser.contents.meta = accumulate.meta
            kept = self._flush.kept_call(call_id)
            runs[key] = _ArgumentRun(
                call_id, call, parser.parser, kept, accumulate.meta, accumulate.max_argument_chars
            )

    def finish(self) -> Sequence[AgentResponseResult]:
        self._by_id.clear()
        self._by_index.clear()
        return self._chain.finish()

    def fail(self, error: Exception) -> Sequence[AgentResponseResult]:
        self._by_id.clear()
        self._by_index.clear()
        return self._chain.fail(error)
