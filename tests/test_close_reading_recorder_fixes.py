"""Regression tests for the bugs a close, line-by-line reading of rafrx's code found
(recorder side; the passing pins of the same reading are in test_close_reading_recorder.py).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
import reactivex
from reactivex import operators as rxops

from rafrx import ChatMessage, FinishReason
from rafrx import updates as u
from rafrx.errors import HTTPStatusError, ProviderError, TransportError
from rafrx.recorder import guess_dialect, load, record, replay
from rafrx.sources.clients import OpenAIChatClient
from rafrx.testing import Fault, LLMServer, Reply, render

GUARD = 5.0  # seconds, against hangs only
SECRET = "c0ffee1234deadbeef5678"


def _texts(path: Path) -> str:
    items = replay(path).pipe(rxops.to_list()).run()
    return "".join(i.delta for i in items if isinstance(i, u.TextDelta))


# ---------------------------------------------------------------- 1


@pytest.mark.asyncio
async def test_recording_a_429_with_an_endless_retry_after_ends_the_subscriber_with_the_error(
    tmp_path: Path,
) -> None:
    """What the user does: wraps ``client.stream(...)`` in ``record(..., path)`` and the
    provider answers 429 with a ``Retry-After`` too large for a float (``1e400``; rafrx's
    own ``parse_retry_after`` documents that this becomes ``inf``).

    What happens: ``record``'s ``on_error`` encodes the error's attributes, among them
    ``retry_after=inf``; ``_write`` calls ``json.dumps(..., allow_nan=False)`` which raises
    ``ValueError`` inside ``on_error`` (recorder.py:403 -> 392 -> 425). The exception
    escapes before ``observer.on_error`` is called: the subscriber never hears of the
    error and waits forever; the file has no error line (its replay says the stream
    was cut short instead of replaying the 429).

    What should happen: the subscriber gets the ``HTTPStatusError``, and the recording
    ends with an error line. The module docstring promises "then a ``completed`` or
    ``error`` line" and "Replaying gives back ... the same terminal event"; items
    already tag non-finite floats as ``{"$float": "inf"}`` (``_encode``), errors do not.
    """
    path = tmp_path / "turn.jsonl"
    async with LLMServer() as server:
        server.enqueue(Fault.status(429, retry_after="1e400"))
        client = OpenAIChatClient(server.url + "/v1", api_key="sk-test-000000000000000000")
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        record(client.stream([ChatMessage.user("Hi")]), path).subscribe(
            on_error=lambda e: done.done() or done.set_result(e),
            on_completed=lambda: done.done() or done.set_result(None),
        )
        try:
            error = await asyncio.wait_for(asyncio.shield(done), GUARD)
        except TimeoutError:
            error = None
        await client.aclose()
    assert isinstance(error, HTTPStatusError), f"the subscriber got {error!r} (None: nothing)"
    assert isinstance(load(path).error, HTTPStatusError)


# ---------------------------------------------------------------- 2


@pytest.mark.parametrize(
    "error",
    [
        TransportError("connection refused"),
        ProviderError("Overloaded", error_type="overloaded_error"),
        HTTPStatusError(503),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_replayed_error_keeps_its_none_attributes_and_its_repr(
    tmp_path: Path, error: Exception
) -> None:
    """What the user does: records a stream that fails with a rafrx error whose
    optional attributes are ``None`` (a ``TransportError`` has ``status=None``,
    ``body=None``; a ``ProviderError`` ``code=None``; an ``HTTPStatusError`` without
    ``Retry-After`` ``retry_after=None``), then loads or replays it and looks at it.

    What happens: ``_encode_error`` (recorder.py:271-274) keeps only str/int/float/bool
    attributes, so every ``None`` one is dropped; ``_decode_error`` (recorder.py:283-287)
    builds the error with ``__new__`` and never sets them. ``err.status``,
    ``err.retry_after``, ``err.code`` ... raise ``AttributeError``, and so does
    ``repr(err)`` (``RafrxError.__repr__`` reads ``self.status``) -- in a traceback,
    a log line, pytest's report.

    What should happen: the replayed error has every attribute the class documents
    (``RafrxError``'s docstring lists ``status``, ``body``; ``HTTPStatusError``'s
    ``retry_after``, ``request_id`` ...), ``None`` where the original had ``None``; the
    recorder's docstring says the error is "rebuilt as the same rafrx.errors class".
    ``RetryPolicy.delay`` reads ``retry_after`` with ``getattr(..., None)`` but user code
    follows the documented attributes.
    """
    path = tmp_path / "turn.jsonl"
    with pytest.raises(type(error)):
        record(reactivex.throw(error), path).run()
    replayed = load(path).error
    assert replayed is not None
    for name, value in vars(error).items():
        if name != "partial":
            assert getattr(replayed, name, "<missing>") == value, name
    assert repr(replayed) == repr(error)


# ---------------------------------------------------------------- 3


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Azure: https://r.openai.azure.com/x?api-version=1&api-key=", f"{SECRET} done"),
        ("Azure: https://r.openai.azure.com/x?api-version=1&api-", f"key={SECRET} done"),
        ("Gemini: https://g.googleapis.com/v1?x-goog-", f"api-key={SECRET} done"),
        ("Hook: https://h.example.com/v1?access-", f"token={SECRET} done"),
    ],
)
def test_a_hyphenated_key_parameter_split_between_deltas_is_redacted(
    tmp_path: Path, first: str, second: str
) -> None:
    """What the user does: records a turn in which the model writes a URL carrying a
    credential in a hyphenated query parameter (Azure OpenAI's ``?api-key=``,
    ``x-goog-api-key``, ``access-token``), the stream splitting it between two deltas.

    What happens: the secret value is written to the file in clear. Whole, the URL
    is redacted (``_PATTERNS`` accepts ``api[_-]?key``, ``x-goog-api-key``,
    ``access[_-]token``), but ``_OPEN_PATTERNS[3]`` (_redaction.py:346), which decides
    whether a delta's end may still grow into such a parameter, knows only
    ``[a-z_]{0,12}`` names (no ``-``) and the values of ``api_key|apikey|key|token|
    access_token``: a delta ending in ``?api-``, ``?x-goog-`` or ``&api-key=`` is
    settled at once, and the next delta, whose context is one character, no longer
    matches ``[?&]api-key=``.

    What should happen: the same as for ``?api_key=`` or ``?key=`` split the same way
    (both are redacted): the recorder's docstring promises ``key=`` URL parameters
    are redacted and "a secret split between deltas ... is redacted as a whole".
    """
    path = tmp_path / "turn.jsonl"
    items = [u.TextDelta(first), u.TextDelta(second), u.Finish(FinishReason.STOP)]
    record(reactivex.from_iterable(items), path).run()
    assert SECRET not in path.read_text(encoding="utf-8")
    assert "[REDACTED]" in _texts(path)


# ---------------------------------------------------------------- 4


def _many_tools(count: int = 60) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": f"tool_{i}",
            "description": "Looks something up. " * 15,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
        for i in range(count)
    ]


def test_a_responses_body_with_a_long_first_event_is_replayed_as_responses(
    tmp_path: Path,
) -> None:
    """What the user does: saves an OpenAI Responses stream of an agent that offers
    many tools (``record_sse`` without ``meta``, ``record_http`` without ``dialect``,
    or a saved curl body) and replays it with ``replay(path, dialect="auto")`` or
    ``python -m rafrx replay turn.sse`` (which passes ``"auto"``).

    What happens: ``response.created`` echoes the request's ``tools`` (and, at OpenAI,
    its ``instructions``), so the first event is larger than 16 KiB. ``guess_dialect``
    (recorder.py:514-534) feeds only ``body[:16384]`` to an SSE decoder, which returns
    complete events only: it sees none, and falls back to ``"openai-chat"``. The
    replay then fails with ``IncompleteStream`` ("without [DONE]") instead of giving
    the recorded turn.

    What should happen: the ``event: response.created`` line at the very start of the
    body says which dialect it is (``guess_dialect``'s docstring: "The first events
    tell, by their names"); the replay gives the text of the turn.
    """
    body = render(Reply(text="Paris."), "openai-responses", {"tools": _many_tools()})
    assert len(body.split(b"\n\n", 1)[0]) > 16384  # (the premise)
    assert guess_dialect(body) == "openai-responses"
    path = tmp_path / "turn.sse"
    path.write_bytes(body)
    items = replay(path, dialect="auto").pipe(rxops.to_list()).run()
    assert "".join(i.delta for i in items if isinstance(i, u.TextDelta)) == "Paris."


# ---------------------------------------------------------------- 5


def test_an_error_attribute_named_type_does_not_replace_the_recorded_class(
    tmp_path: Path,
) -> None:
    """What the user does: records a stream that fails with an exception carrying a
    ``type`` attribute -- the OpenAI SDK's ``openai.APIError`` has one (the provider's
    error type, e.g. ``invalid_request_error``) -- and replays it.

    What happens: ``_encode_error`` (recorder.py:270-274) writes the class name under
    ``"type"``, then copies every str attribute into the same dict, so the error's own
    ``type`` attribute overwrites the class name. ``_decode_error`` then looks up
    ``"invalid_request_error"`` as a class and rebuilds ``RafrxError(
    "invalid_request_error: Bad key")``.

    What should happen: a foreign error replays as ``RafrxError("APIError: Bad key")``,
    as one without a ``type`` attribute does (``_decode_error``'s fallback names the
    class): the state's ``type`` key must not be writable by the error's attributes.
    """
    error = openai.APIError(
        "Bad key",
        httpx2.Request("POST", "https://api.openai.com/v1/chat/completions"),
        body={"type": "invalid_request_error", "code": "invalid_api_key"},
    )
    path = tmp_path / "turn.jsonl"
    with pytest.raises(openai.APIError):
        record(reactivex.throw(error), path).run()
    replayed = load(path).error
    assert str(replayed) == "APIError: Bad key"
