"""Regression tests of session 10's fixes to the clients, the SSE decoding of a dialect
of one's own, and the agent's reading of a client's errors.

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import reactivex

from rafrx import Agent, collect_agent_response
from rafrx import operators as ops
from rafrx import updates as u
from rafrx.errors import (
    HTTPStatusError,
    IncompleteStream,
    MalformedEvent,
    RafrxError,
    TransportError,
)
from rafrx.messages import ChatMessage
from rafrx.response import FinishReason
from rafrx.sources import UpdateDecoder, from_sse
from rafrx.sources.clients import LLMClient, ToolLike
from rafrx.sources.dialects import DIALECTS
from rafrx.sources.dialects._common import load_object
from rafrx.sse import ServerSentEvent
from rafrx.testing import LLMServer, Replay
from tests.reliability.test_failure_cycles import Seen, assert_freed, gc_off


class _NoDialect(LLMClient):
    """A client of one's own that forgot its ``dialect``."""

    endpoint = "chat/completions"
    default_model = "m"

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        return {"model": self.model, "messages": [m.to_openai() for m in messages]}


def test_a_client_without_a_dialect_is_refused_when_made() -> None:
    """An ``LLMClient`` subclass without ``dialect`` was made without complaint and
    failed only at ``stream()``, with ``AttributeError: '_NoDialect' object has no
    attribute 'dialect'``, which says neither that the class must set it nor what
    to set. ``dialect`` is declared a ``ClassVar`` of ``LLMClient``: making such a
    client is a TypeError naming the class and the attribute to set."""
    with pytest.raises(TypeError, match=r"_NoDialect.*dialect.*openai-chat"):
        _NoDialect("http://127.0.0.1:1")


class _Intermediate(LLMClient):
    """An abstract base of one's own: its subclasses set the dialect."""

    endpoint = "chat/completions"
    default_model = "m"


class _Concrete(_Intermediate):
    dialect = "openai-chat"

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        return {"model": self.model}


class _ByProperty(_Concrete):
    @property
    def dialect(self) -> str:  # type: ignore[override]
        return "anthropic"


def test_a_dialect_set_by_a_subclass_or_a_property_is_accepted() -> None:
    assert _Concrete("http://127.0.0.1:1").dialect == "openai-chat"
    assert _ByProperty("http://127.0.0.1:1").dialect == "anthropic"


class _DialectBug(ValueError):
    """The dialect's own exception (a ValueError; unlike one, weakly referable)."""


class _FailingDialect:
    """A dialect of one's own (``{"text": ...}`` events, ``{"end": true}`` ends) with a
    bug: its third event raises a ``ValueError``."""

    def __init__(self) -> None:
        self._done = False
        self._seen = 0

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: ServerSentEvent) -> list[u.AgentResponseUpdate]:
        self._seen += 1
        if self._seen == 3:
            raise _DialectBug("cannot read the third event")
        data = load_object(event)
        if data.get("end"):
            self._done = True
            return [u.Finish(FinishReason.STOP)]
        return [u.TextDelta(str(data["text"]))]

    def close(self) -> list[u.AgentResponseUpdate]:
        if not self._done:
            raise IncompleteStream("no end event")
        return []


_THREE_EVENTS = b'data: {"text": "a"}\n\ndata: {"text": "b"}\n\ndata: {"text": "c"}\n\n'


def test_a_dialect_raising_mid_chunk_keeps_the_updates_before_it() -> None:
    """A dialect that raises another library's exception (here ``ValueError``) on the
    third event of a chunk: the updates of the first two were dropped
    (``UpdateDecoder.feed`` kept the updates made before a failing event only for a
    ``RafrxError``) and the stream failed with the bare ``ValueError``, not one of
    rafrx's typed errors. As for a dialect's own ``MalformedEvent``, the updates
    come first, then the failure, as a ``MalformedEvent`` (the event could not be
    read) keeping the event's data, caused by the dialect's exception."""
    seen: list[u.AgentResponseUpdate] = []
    errors: list[Exception] = []
    from_sse(_THREE_EVENTS + b'data: {"end": true}\n\n', _FailingDialect).subscribe(
        seen.append, errors.append
    )
    assert seen == [u.TextDelta("a"), u.TextDelta("b")]
    (error,) = errors
    assert isinstance(error, MalformedEvent)
    assert isinstance(error.__cause__, ValueError)
    assert "cannot read the third event" in str(error)
    assert error.raw == '{"text": "c"}'


def test_the_error_of_a_dialect_raising_mid_chunk_has_the_text_before_it() -> None:
    with pytest.raises(MalformedEvent) as info:
        from_sse(_THREE_EVENTS, _FailingDialect).pipe(ops.convert(), ops.aggregate()).run()
    assert info.value.partial is not None
    assert info.value.partial.text == "ab"


def test_a_dialect_raising_on_a_chunk_of_one_event_fails_typed() -> None:
    """The same failure in a chunk of its own (the decoder's fast path)."""
    chunks = [b'data: {"text": "a"}\n\n', b'data: {"text": "b"}\n\n', b'data: {"x": 1}\n\n']
    seen: list[u.AgentResponseUpdate] = []
    errors: list[Exception] = []
    from_sse(chunks, _FailingDialect).subscribe(seen.append, errors.append)
    assert seen == [u.TextDelta("a"), u.TextDelta("b")]
    (error,) = errors
    assert isinstance(error, MalformedEvent)
    assert isinstance(error.__cause__, ValueError)


class _FailingDialectClient(LLMClient):
    dialect = "session10-failing"
    endpoint = "chat/completions"
    default_model = "m"

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        return {"model": self.model}


@pytest.mark.asyncio
async def test_a_client_with_a_dialect_raising_mid_stream_fails_typed_with_the_text_before(
    llm_server: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same dialect registered for a client of one's own: the call failed with
    the bare ``ValueError`` (no ``.partial``: ``aggregate()`` sets it on a
    ``RafrxError`` only), the text of the events before it lost."""
    monkeypatch.setitem(DIALECTS, "session10-failing", _FailingDialect)
    llm_server.enqueue(Replay(_THREE_EVENTS))
    async with _FailingDialectClient(llm_server.url) as client:
        with pytest.raises(MalformedEvent) as info:
            await collect_agent_response(
                client.stream([ChatMessage.user("Hi")]).pipe(ops.convert())
            )
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.partial is not None
    assert info.value.partial.text == "ab"


class _SDKStatusError(Exception):
    """An SDK's status error (openai-python's ``APIStatusError`` shape)."""

    def __init__(self, message: str, status_code: int, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.response = SimpleNamespace(status_code=status_code, headers=headers)


class _HTTPXLikeError(Exception):
    """``httpx.HTTPStatusError``'s shape: the status on its ``response`` only."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.response = SimpleNamespace(status_code=status_code, headers={})


class _WrappingClient:
    """A ChatClient of one's own wrapping another library's stream, which fails."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
        return reactivex.concat(reactivex.of(u.TextDelta("Hel")), reactivex.throw(self.error))


@pytest.mark.asyncio
async def test_a_wrapping_clients_rate_limit_error_is_the_http_status_error_of_its_status() -> None:
    """A client wrapping an SDK whose error says HTTP 429 ended the turn with a
    non-retryable ``TransportError`` ("the client failed: ..."): its status, and that
    the request may be sent again (after ``Retry-After``), were lost. rafrx's own
    client raises ``HTTPStatusError(429)``, retryable, with ``retry_after``: the
    foreign error becomes that, caused by it."""
    sdk_error = _SDKStatusError(
        "Rate limit reached", 429, {"retry-after": "3", "x-request-id": "req_1"}
    )
    with pytest.raises(HTTPStatusError) as info:
        await Agent(_WrappingClient(sdk_error)).send("Hi")
    error = info.value
    assert (error.status, error.retryable, error.retry_after) == (429, True, 3.0)
    assert error.request_id == "req_1"
    assert error.__cause__ is sdk_error
    assert "Rate limit reached" in str(error)
    assert error.partial is not None
    assert error.partial.text == "Hel"


@pytest.mark.asyncio
async def test_a_status_on_the_foreign_errors_response_is_read_too() -> None:
    with pytest.raises(HTTPStatusError) as info:
        await Agent(_WrappingClient(_HTTPXLikeError("Server error", 503))).send("Hi")
    assert (info.value.status, info.value.retryable) == (503, True)


@pytest.mark.asyncio
async def test_a_foreign_error_without_an_http_status_is_still_a_transport_error() -> None:
    with pytest.raises(TransportError) as info:
        await Agent(_WrappingClient(ConnectionResetError("peer reset"))).send("Hi")
    assert not isinstance(info.value, HTTPStatusError)
    assert not info.value.retryable


def _fail_decoding(chunks: list[bytes]) -> Seen:
    seen = Seen()
    decoder = UpdateDecoder(_FailingDialect)
    try:
        for chunk in chunks:
            decoder.feed(chunk)
        decoder.close()
    except RafrxError as error:
        seen.caught(error)
    return seen


_A, _B = b'data: {"text": "a"}\n\n', b'data: {"text": "b"}\n\n'


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "chunks",
    [[_THREE_EVENTS], [_A, _B, _A + _B], [_A + _B]],
    ids=["kept-by-feed", "raised-by-feed", "raised-by-close"],
)
async def test_a_dialect_failing_with_another_exception_is_freed_without_the_gc(
    chunks: list[bytes],
) -> None:
    """The typed error, and the dialect's exception it was caused by, hold no frame of
    the decoder: dropped, they die by reference counting (as a RafrxError of the
    dialect does, tests/reliability/test_failure_cycles.py)."""
    async with gc_off():
        seen = _fail_decoding(chunks)
        assert seen.error_type in (MalformedEvent, IncompleteStream)
        assert_freed(seen.refs)


@pytest.mark.asyncio
async def test_a_dialect_failing_on_a_chunk_of_its_own_is_freed_without_the_gc() -> None:
    async with gc_off():
        seen = Seen()
        decoder = UpdateDecoder(_FailingDialect)
        decoder.feed(b'data: {"text": "a"}\n\n')
        decoder.feed(b'data: {"text": "b"}\n\n')
        try:
            decoder.feed(b'data: {"text": "c"}\n\n')
        except MalformedEvent as error:
            seen.caught(error)
        del decoder
        assert seen.error_type is MalformedEvent
        assert "error.__cause__" in seen.refs
        assert_freed(seen.refs)


@pytest.mark.asyncio
async def test_a_client_naming_an_unknown_dialect_fails_before_sending() -> None:
    """A class whose ``dialect`` names no registered dialect (a typo) sent its request,
    paid for the answer, and only then failed decoding it: ``stream()`` now refuses
    it with the ValueError listing the known names, before anything is sent."""

    class _Typo(_NoDialect):
        dialect = "openai"

    async with LLMServer() as server:
        client = _Typo(server.url)
        with pytest.raises(ValueError, match=r"unknown dialect 'openai'.*'openai-chat'"):
            await collect_agent_response(
                client.stream([ChatMessage.user("hi")]).pipe(ops.convert())
            )
        await client.aclose()
        assert list(server.requests) == []
