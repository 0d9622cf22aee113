"""Helpers shared by the dialects: JSON decoding, shape checks, error mapping.

Example:
    >>> from rafrx.sse import ServerSentEvent
    >>> load_object(ServerSentEvent(data='{"a": 1}'))
    {'a': 1}
    >>> is_retryable("overloaded_error", None)
    True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, TypeVar

import msgspec

from rafrx import response
from rafrx._slot_init import slot_builder
from rafrx.errors import MalformedEvent, ProviderError
from rafrx.sse import ServerSentEvent
from rafrx.updates import AgentResponseUpdate, ReasoningDelta, TextDelta, ToolCallArgs

# 3-5x faster than json.loads (and 1.1x orjson) on provider chunks: bench/json_decoders.py
_fast_loads = msgspec.json.decode

S = TypeVar("S", bound=msgspec.Struct)

__all__ = [
    "CUSTOM_INPUT_HEAD",
    "CUSTOM_INPUT_TAIL",
    "NOT_FITTING",
    "Dialect",
    "as_int",
    "as_str",
    "end_marker",
    "error_event",
    "event_json",
    "get_list",
    "get_object",
    "is_retryable",
    "json_escaped",
    "load_object",
    "malformed",
    "provider_error",
    "reasoning_delta",
    "text_delta",
    "tool_call_args",
    "typed_decoder",
]

# The updates a dialect makes per token, built without the class call (see
# :func:`~rafrx._slot_init.slot_builder`): the same objects, for fewer instructions.
text_delta: Final[Callable[[str], TextDelta]] = slot_builder(TextDelta)
reasoning_delta: Final[Callable[[str, Any], ReasoningDelta]] = slot_builder(ReasoningDelta)
"""``ReasoningDelta(delta, provider_data=...)``, both given."""
tool_call_args: Final[Callable[[str, str], ToolCallArgs]] = slot_builder(ToolCallArgs)


class Dialect(Protocol):
    """A provider's stream format: provider events in, rafrx updates out (sans-IO).

    One instance reads one stream. Call :meth:`feed` with each decoded event
    until :attr:`done` is true, then :meth:`close` once.

    A dialect may also have ``salvage() -> list[AgentResponseUpdate]``: what it
    still owes once the stream failed (usually the usage reported so far, which
    would have come with the ``Finish``, or the ``Finish`` itself when its finish
    reason came); :meth:`UpdateDecoder.salvage
    <rafrx.sources.UpdateDecoder.salvage>` calls it.
    """

    @property
    def done(self) -> bool:
        """True once the terminal marker was seen: stop reading."""
        ...

    def feed(self, event: ServerSentEvent) -> list[AgentResponseUpdate]:
        """Translate one event (ignored once :attr:`done`) into a new list of updates.

        Raises:
            ProviderError: The event reports an error.
            MalformedEvent: The data is not JSON, or not the expected shape.
        """
        ...

    def close(self) -> list[AgentResponseUpdate]:
        """End of input: what is still held back (usually the ``Finish``).

        Raises:
            IncompleteStream: No terminal marker was seen.
        """
        ...


CUSTOM_INPUT_HEAD = '{"input": "'
"""The arguments of a custom (free-form) tool call start so: ``{"input": text}``."""
CUSTOM_INPUT_TAIL = '"}'
"""... and end so, around its JSON-escaped input."""


def json_escaped(text: str) -> str:
    """``text`` as it stands inside a JSON string (a piece of it: the same).

    Example:
        >>> print(json_escaped('say "hi"'))
        say \\"hi\\"
    """
    return json.dumps(text, ensure_ascii=False)[1:-1]


def malformed(event: ServerSentEvent, why: str) -> MalformedEvent:
    """A :class:`MalformedEvent` for ``event``, keeping its raw data."""
    return MalformedEvent(why, raw=event.data, event_name=event.event)


def event_json(event: ServerSentEvent, value: Any, what: str) -> str:
    """``value``, read from ``event``, as JSON text (non-ASCII kept): arguments a
    provider sent as a JSON value where rafrx streams text.

    Raises:
        MalformedEvent: ``value`` is nested too deeply to write back (JSON that was
            read close to Python's recursion limit), a typed error, as for data
            nested too deeply to read.

    Example:
        >>> event_json(ServerSentEvent(data="{}"), {"q": "é"}, "arguments")
        '{"q": "é"}'
        >>> deep: list[object] = []
        >>> for _ in range(100_000):
        ...     deep = [deep]
        >>> event_json(ServerSentEvent(data="{}"), deep, "the arguments")
        Traceback (most recent call last):
        rafrx.errors.MalformedEvent: the arguments: nested too deeply to write as JSON
    """
    try:
        return json.dumps(value, ensure_ascii=False)
    except RecursionError:
        raise malformed(event, f"{what}: nested too deeply to write as JSON") from None


def end_marker(event: ServerSentEvent) -> bool | None:
    """What an event whose data is no JSON object says before it is loaded: ``False``
    for blank data (a keep-alive: nothing), ``True`` for ``[DONE]`` (OpenAI chat's
    end, which gateways also add to Anthropic and Responses streams: the end of
    the input), ``None`` for data to load (:func:`load_object` refuses a non-object).

    Example:
        >>> [end_marker(ServerSentEvent(data=d)) for d in (" ", "[DONE]", "{}", "x")]
        [False, True, None, None]
    """
    if event.data[:1] == "{":
        return None
    text = event.data.strip()
    if not text:
        return False
    return True if text == "[DONE]" else None


def load_object(event: ServerSentEvent) -> dict[str, Any]:
    """Parse an event's data as a JSON object.

    Raises:
        MalformedEvent: The data is not JSON, or JSON but not an object.
    """
    data = event.data
    try:
        value = _fast_loads(data)
    except (ValueError, RecursionError):
        # msgspec is stricter than json (NaN, Infinity, lone surrogates, nesting): let
        # the standard library decide, so rafrx accepts exactly what json.loads accepts.
        try:
            value = json.loads(data)
        except (ValueError, RecursionError) as err:
            raise malformed(event, f"event data is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise malformed(event, f"expected a JSON object, got {type(value).__name__}")
    return value


NOT_FITTING: Final = (msgspec.DecodeError, RecursionError, UnicodeEncodeError)
"""What a :func:`typed_decoder` raises for data that does not fit its struct (DecodeError:
not JSON, or JSON of another shape; UnicodeEncodeError: a lone surrogate in the text)."""


def typed_decoder(shape: type[S]) -> Callable[[str], S]:
    """A decoder of event data into the msgspec struct ``shape``, raising one of
    :data:`NOT_FITTING` if the data does not fit.

    Data that does not fit (not JSON, or JSON of another shape) is for the
    dialect's general path, :func:`load_object`. Members the struct does not
    name are skipped, not built, so a dialect's usual event costs one C call
    (a dialect calls the decoder itself, in a ``try``: a Python wrapper
    returning ``None`` cost about 400 instructions an event);
    what fits decodes to the values :func:`json.loads` gives (JSONTestSuite and
    the fast-path tests in ``tests/sources/test_dialect_fast_paths.py``). One
    difference: a skipped member is not checked against Python's limit on the
    digits of an integer (``sys.get_int_max_str_digits()``), which
    :func:`json.loads` applies; the fast path reads such data as
    :func:`json.loads` does without that limit.

    Example:
        >>> class Point(msgspec.Struct):
        ...     x: int
        >>> decode = typed_decoder(Point)
        >>> decode('{"x": 1, "label": "skipped"}')
        Point(x=1)
        >>> for data in ('{"x": "1"}', "[1]", '{"x": 1'):
        ...     try:
        ...         decode(data)
        ...     except NOT_FITTING as err:
        ...         print(type(err).__name__)
        ValidationError
        ValidationError
        DecodeError
    """
    return msgspec.json.Decoder(shape).decode


def get_object(
    event: ServerSentEvent, parent: Mapping[str, Any], key: str
) -> dict[str, Any] | None:
    """``parent[key]`` if it is an object, ``None`` if absent or null.

    Raises:
        MalformedEvent: The member has another type.
    """
    value = parent.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise malformed(event, f"{key!r} should be an object, got {type(value).__name__}")


def get_list(event: ServerSentEvent, parent: Mapping[str, Any], key: str) -> list[Any]:
    """``parent[key]`` if it is an array, ``[]`` if absent or null.

    Raises:
        MalformedEvent: The member has another type.
    """
    value = parent.get(key)
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise malformed(event, f"{key!r} should be an array, got {type(value).__name__}")


def as_str(value: Any) -> str | None:
    """``value`` if it is a non-empty string, else ``None`` (nulls are absent)."""
    return value if isinstance(value, str) and value else None


def as_int(value: Any) -> int | None:
    """``value`` as an int if it is a JSON integer (not a bool), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


_RETRYABLE_WORDS = (
    "overloaded",
    "rate_limit",
    "ratelimit",
    "server_error",
    "api_error",
    "internal",
    "timeout",
    "unavailable",
    "too_many_requests",
)
_RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def is_retryable(error_type: str | None, code: Any, status: Any = None) -> bool:
    """Whether a provider error is transient (rate limit, overload, server error).

    Example:
        >>> is_retryable("rate_limit_error", None), is_retryable("insufficient_quota", 429)
        (True, False)
        >>> is_retryable(None, None, 503), is_retryable("invalid_request_error", 400)
        (True, False)
    """
    words = " ".join(w.lower() for w in (error_type, code) if isinstance(w, str))
    if "quota" in words:
        return False  # out of credit: waiting does not help
    if any(word in words for word in _RETRYABLE_WORDS):
        return True
    return any(
        (n := as_int(value)) is not None and (n in _RETRYABLE_STATUSES or 500 <= n < 600)
        for value in (code, status)
    )


def provider_error(
    event: ServerSentEvent, payload: Mapping[str, Any] | None, default: str = "provider error"
) -> ProviderError:
    """A :class:`ProviderError` from an error object (``{"message", "type", "code"}``).

    ``default`` is the message when the object has none. Bedrock's OpenAI-compatible
    endpoint puts the message under ``error`` and the code under ``error_code``.

    Example:
        >>> err = provider_error(
        ...     ServerSentEvent(event="error", data="..."),
        ...     {"type": "overloaded_error", "message": "Overloaded"},
        ... )
        >>> err.message, err.error_type, err.retryable
        ('Overloaded', 'overloaded_error', True)
    """
    payload = payload or {}
    message = payload.get("message")
    if not isinstance(message, str) or not message:
        message = payload.get("error")
    if not isinstance(message, str) or not message:
        message = default
    error_type = as_str(payload.get("type"))
    raw_code = payload.get("code", payload.get("error_code"))
    code = None if raw_code is None else str(raw_code)
    status = payload.get("status_code", payload.get("status"))
    return ProviderError(
        message,
        error_type=error_type,
        code=code,
        retryable=is_retryable(error_type, raw_code, status),
        body=event.data,
    )


def error_event(event: ServerSentEvent) -> ProviderError:
    """The :class:`ProviderError` an ``event: error`` stands for, whatever its data.

    An error object, or an object holding one under ``error`` (itself an
    object or a string); a JSON string or plain text (the message); nothing
    at all (``"provider error"``). The data is kept as the error's ``body``.

    Example:
        >>> error_event(ServerSentEvent(event="error", data='{"error": "overloaded"}')).message
        'overloaded'
        >>> error_event(ServerSentEvent(event="error", data="upstream timed out")).message
        'upstream timed out'
        >>> error_event(ServerSentEvent(event="error", data="")).message
        'provider error'
    """
    text = event.data.strip()
    try:
        payload = json.loads(text) if text else None
    except (ValueError, RecursionError):
        payload = text  # plain text is still the provider's message
    if isinstance(payload, dict):
        inner = payload.get("error")
        if isinstance(inner, dict):
            return provider_error(event, inner)
        if isinstance(inner, str) and inner:
            return provider_error(event, {**payload, "message": inner})
        return provider_error(event, untagged(payload))
    return provider_error(event, {"message": payload} if isinstance(payload, str) else None)


def untagged(error: Mapping[str, Any]) -> Mapping[str, Any]:
    """An error event that is its own error object (openai's ``ResponseErrorEvent``:
    ``{"type": "error", "code", "message"}``), its code as the type: the ``type`` only
    says which event it is.

    Example:
        >>> untagged({"type": "error", "code": "rate_limit_exceeded"})["type"]
        'rate_limit_exceeded'
    """
    return {**error, "type": error.get("code")} if error.get("type") == "error" else error


def openai_usage(usage: Mapping[str, Any], *, prompt: str, completion: str) -> response.Usage:
    """Map an OpenAI-style usage object (Chat: ``prompt``/``completion``, Responses:
    ``input``/``output``) to :class:`rafrx.Usage`, with its ``…_tokens_details``.

    Example:
        >>> openai_usage({"input_tokens": 2, "output_tokens": 3}, prompt="input",
        ...              completion="output").total_tokens
        5
    """
    prompt_tokens = as_int(usage.get(f"{prompt}_tokens")) or 0
    completion_tokens = as_int(usage.get(f"{completion}_tokens")) or 0
    total = as_int(usage.get("total_tokens"))
    prompt_details = usage.get(f"{prompt}_tokens_details")
    completion_details = usage.get(f"{completion}_tokens_details")
    cached = reasoning = None
    if isinstance(prompt_details, dict):
        cached = as_int(prompt_details.get("cached_tokens"))
    if isinstance(completion_details, dict):
        reasoning = as_int(completion_details.get("reasoning_tokens"))
    return response.Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens if total is None else total,
        reasoning_tokens=reasoning,
        cached_tokens=cached,
    )
