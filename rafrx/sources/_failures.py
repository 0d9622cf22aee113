"""What a failed response says, in words: its body's text, the provider's error in
it, and why a body stopped."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp.http_exceptions import (
    ContentLengthError,
    HttpProcessingError,
    PayloadEncodingError,
    TransferEncodingError,
)

from rafrx._partial_json import partial_json
from rafrx.errors import RafrxError

__all__ = [
    "body_text",
    "first_line",
    "note_attempts",
    "provider_error",
    "why_broken",
]


def body_text(data: bytes, response: aiohttp.ClientResponse) -> str:
    """``data`` decoded as ``response`` declares it (U+FFFD for what does not decode),
    or as UTF-8 when Python has no text encoding by that name: an unknown one, a
    bytes-to-bytes codec (``hex``, ``zlib``) or one without ``"replace"`` (``idna``)."""
    charset = response.charset
    if charset:
        with contextlib.suppress(LookupError, UnicodeError):
            return data.decode(charset, "replace").removeprefix("\ufeff")
    return data.decode("utf-8", "replace").removeprefix("\ufeff")  # a BOM (.NET / IIS)


def provider_error(body: str, *, cut: bool = False) -> tuple[str | None, str | None, str | None]:
    """The provider's error message, type and code, from the usual JSON shapes.

    A body ``cut`` at the read limit gives what its JSON holds up to the cut: a
    message the cut goes through comes cut short.

    Example:
        >>> provider_error('{"error": {"type": "server_error", "message": "Too lo')
        (None, None, None)
        >>> provider_error('{"error": {"type": "server_error", "message": "Too lo', cut=True)
        ('Too lo', 'server_error', None)
    """
    data = _json_of(body, cut=cut)
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        data = data[0]  # Gemini wraps its error in a list
    if not isinstance(data, Mapping):
        return None, None, None
    error = data.get("error")
    code = None
    if isinstance(error, Mapping):
        message, kind = error.get("message"), error.get("type") or error.get("status")
        code = error.get("code")
        if kind is None and isinstance(code, str):
            kind = code
    elif isinstance(error, str):
        message, kind = error, None
    else:
        message = data.get("message") or data.get("detail")
        kind = data.get("type") if data.get("type") != "error" else None
    if isinstance(code, int) and not isinstance(code, bool):
        code = str(code)  # OpenRouter's, Gemini's (as the dialects keep an in-band one)
    return (
        message if isinstance(message, str) else None,
        kind if isinstance(kind, str) else None,
        code if isinstance(code, str) else None,
    )


def _json_of(body: str, *, cut: bool) -> Any:
    """The JSON value of ``body``, of the part of it before the cut if it was ``cut``;
    ``None`` when it is not JSON, or is nested too deeply to build."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        if not cut:
            return None
    try:
        return partial_json(body)
    except (ValueError, RecursionError):
        return None


def first_line(text: str, limit: int = 200) -> str | None:
    """The first non-blank line of ``text``, clipped to ``limit`` characters."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not line:
        return None
    return line if len(line) <= limit else line[: limit - 1] + "…"


def why_broken(exc: BaseException) -> str:
    """Why a response body stopped, in words. (aiohttp's payload error quotes its
    parser's exception, ``<TransferEncodingError: 400, message=...>``: no HTTP 400.)"""
    cause = exc.__cause__
    if isinstance(cause, ContentLengthError):
        return "the body ended before its Content-Length"
    if isinstance(cause, TransferEncodingError):
        return "the chunked body ended before its last chunk"
    if isinstance(cause, PayloadEncodingError) or isinstance(exc, PayloadEncodingError):
        return "the compressed body could not be decoded"
    if isinstance(exc, aiohttp.ClientPayloadError):  # (its words, without a repr it quotes)
        return re.split(r"[:.] <", str(exc), maxsplit=1)[0] or "the response body was cut short"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, HttpProcessingError):
        return f"invalid HTTP framing ({exc.message})"
    return f"{type(exc).__name__}: {exc}"


def note_attempts(error: RafrxError, attempts: int) -> None:
    """Say on ``error``, the last attempt's, that the request was sent ``attempts`` times."""
    error.attempts = attempts
    error.message = f"{error.message} (after {attempts} attempts)"
    error.args = (error.message, *error.args[1:])
