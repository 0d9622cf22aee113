"""How long a request may wait (:class:`Timeouts`) and when a failed one is sent
again (:class:`RetryPolicy`, with the server's ``Retry-After``)."""

from __future__ import annotations

import datetime
import email.utils
import math
import random
import time
from collections.abc import Mapping
from typing import Any, final

import attrs

from rafrx.errors import RafrxError

__all__ = ["RetryPolicy", "Timeouts", "parse_retry_after", "request_id"]


def _optional_positive(instance: Any, attribute: Any, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be positive or None, got {value}")


@final
@attrs.frozen
class Timeouts:
    """How long a request may wait; ``None`` waits forever.

    There is deliberately no total timeout: a long generation is fine as long
    as bytes keep coming.

    Attributes:
        connect: Seconds to open the connection (TCP and TLS).
        first_byte: Seconds from sending the request to the response headers.
        idle: Seconds without any byte of the body (keep-alive comments count).
    """

    connect: float | None = attrs.field(default=10.0, validator=_optional_positive)
    first_byte: float | None = attrs.field(default=60.0, validator=_optional_positive)
    idle: float | None = attrs.field(default=60.0, validator=_optional_positive)


@final
@attrs.frozen
class RetryPolicy:
    """Opt-in retries of failed requests, never of delivered output.

    A request is retried only when its error is retryable (HTTP 408, 409,
    429, 5xx, a refused connection, a connect timeout, a retryable provider
    error; an ``x-should-retry`` header overrides) and no update was emitted
    yet, so nothing is ever duplicated. The response's metadata (its id and
    model) waits for its first content, so an overloaded provider's error
    event right after ``message_start`` is retried too. The wait is the server's
    ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date) when given,
    else exponential backoff; a server asking for more than
    ``max_retry_after`` seconds (``inf`` included) is not retried. When it
    gives up, the stream ends with the last attempt's error, whose
    ``attempts`` says how many were made (and its message, "(after N attempts)").
    Each retry is logged at INFO on the ``rafrx.sources._http`` logger: which
    attempt failed, its status or error class, and the delay.

    Example:
        >>> from rafrx.errors import HTTPStatusError
        >>> policy = RetryPolicy(initial_backoff=0.5, jitter=False)
        >>> [policy.delay(HTTPStatusError(503), attempt) for attempt in (1, 2, 3)]
        [0.5, 1.0, None]
        >>> policy.delay(HTTPStatusError(429, retry_after=3.0), 1)
        3.0
        >>> print(policy.delay(HTTPStatusError(429, retry_after=math.inf), 1))
        None
    """

    max_attempts: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    jitter: bool = True

    def delay(self, error: BaseException, attempt: int) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``; ``None``: do not retry.

        Args:
            error: Why attempt ``attempt`` failed.
            attempt: The number of the failed attempt, from 1.
        """
        if attempt >= self.max_attempts:
            return None
        if not isinstance(error, RafrxError) or not error.retryable:
            return None
        retry_after = getattr(error, "retry_after", None)
        if isinstance(retry_after, int | float):
            if not math.isfinite(retry_after) or retry_after > self.max_retry_after:
                return None  # even with max_retry_after=inf: never sleep forever
            return max(0.0, float(retry_after))
        backoff = min(self.max_backoff, self.initial_backoff * 2.0 ** (attempt - 1))
        if self.jitter:
            backoff *= 1.0 - 0.25 * random.random()
        return backoff


def request_id(headers: Mapping[str, str]) -> str | None:
    """The server's id for a request: OpenAI's ``x-request-id``, Anthropic's ``request-id``
    (``headers`` matched as given: aiohttp's ignore case, a plain dict's in lower case)."""
    return headers.get("x-request-id") or headers.get("request-id")


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds a response asks to wait: ``retry-after-ms``, else ``Retry-After``.

    ``None`` when neither is a number or a date (``"nan"`` is not a number);
    a value too large for a float (``1e400``, ``inf``) is ``inf``: longer
    than any wait.

    Example:
        >>> parse_retry_after({"retry-after-ms": "1500"}), parse_retry_after({"Retry-After": "2"})
        (1.5, 2.0)
        >>> parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0)
        10.0
        >>> parse_retry_after({"Retry-After": "1e400"}), parse_retry_after({"Retry-After": "nan"})
        (inf, None)
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _seconds(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # the asctime form: an HTTP date is always GMT (RFC 9110 5.6.7)
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _seconds(value: str | None) -> float | None:
    """A header's number, at least 0 (``inf`` stays ``inf``); None when absent or not a
    number (``"nan"``)."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return None if math.isnan(number) else max(0.0, number)
