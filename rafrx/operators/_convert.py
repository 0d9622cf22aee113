"""``convert()``: the four converter stages as one reducer, with fast paths.

:class:`Converter` runs :class:`LegacyDeltaSplitter`,
:class:`ToolCallAccumulator`, :class:`ArgsStreamParser` and
:class:`ToolCallFlusher` as a :class:`Chain`. Two kinds of update make up
nearly every chunk of a stream, and for them it calls the stages' own
narrow methods instead of stepping each stage, which gives the same result
with fewer intermediate objects:

* a text or reasoning delta: the splitter passes it and the argument parser
  passes the result (it holds no tool-call content), so only the
  accumulator and the flusher see it;
* an argument fragment of a call that is already open (a ``ToolCallArgs``,
  or a ``ToolCallDelta`` that only continues a started call): one result
  holding the ``ToolCallArgsContent`` and the Parsed / Progress contents
  that follow it, built once instead of once per stage.

Everything else goes through the chain. The equivalence with the four
operators piped apart is property-tested (``tests/operators/test_convert.py``).

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

from rafrx import updates as u
from rafrx.content import Content
from rafrx.operators._accumulate_tool_calls import DEFAULT_MAX_ARGUMENT_CHARS, ToolCallAccumulator
from rafrx.operators._flush_tool_calls import ToolCallFlusher
from rafrx.operators._parse_args_stream import ArgsStreamParser
from rafrx.operators._reducer import Chain
from rafrx.operators._split_legacy_delta import LegacyDeltaSplitter
from rafrx.response import AgentResponseResult

__all__ = ["Converter"]

_ACCUMULATE = 1  # the accumulator's place in the chain (for Chain.raised)


class Converter:
    """The reducer behind :func:`~rafrx.operators.convert` (see the module docstring)."""

    __slots__ = ("_accumulate", "_chain", "_flush", "_parse", "_split")

    def __init__(
        self, eager: bool = False, max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS
    ) -> None:
        self._split = LegacyDeltaSplitter()
        self._accumulate = ToolCallAccumulator(max_argument_chars)
        self._parse = ArgsStreamParser()
        self._flush = ToolCallFlusher(eager)
        self._chain: Chain[u.AgentResponseUpdate, AgentResponseResult] = Chain(
            self._split, self._accumulate, self._parse, self._flush
        )

    def step(self, update: u.AgentResponseUpdate) -> Sequence[AgentResponseResult]:
        kind = type(update)
        if kind is u.TextDelta or kind is u.ReasoningDelta:
            results = self._accumulate.step(update)
            for result in results:
                self._flush.seen(result)
            return results
        if type(update) is u.ToolCallArgs:
            return self._arguments(update.id, update.args_delta)
        if type(update) is u.ToolCallDelta:
            call_id = self._split.continued_call(update)
            if call_id is not None:
                return self._arguments(call_id, update.arguments_delta)
        return self._chain.step(update)

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
        result = self._accumulate.result(tuple(contents))
        self._flush.seen(result)
        return (result,)

    def finish(self) -> Sequence[AgentResponseResult]:
        return self._chain.finish()

    def fail(self, error: Exception) -> Sequence[AgentResponseResult]:
        return self._chain.fail(error)
