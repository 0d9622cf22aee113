"""Keeping API keys out of what a failed request reports: error texts, bodies and URLs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from yarl import URL

from rafrx._redaction import env_secrets, redact_with, secret_prefix_at, secret_spans
from rafrx.errors import RafrxError

__all__ = ["masked_url", "redact", "redact_cut", "redact_error"]


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``***``, and what any key looks like
    (``sk-…``, ``Bearer …``: a gateway may add its own) and the environment's
    secrets (``*_API_KEY`` …) by ``[REDACTED]``, as the recorder does.

    A secret shorter than :data:`~rafrx._redaction.SHORT_SECRET` characters
    (``api_key="k"`` for a local server) is replaced only where it stands as a
    whole word, not inside every word that holds it.

    Example:
        >>> redact("bad key sk-123", ["sk-123"])
        'bad key ***'
        >>> redact("upstream said: Bearer sk-proj-0123456789abcdefXYZ", [])
        'upstream said: Bearer [REDACTED]'
        >>> redact("invalid api key: k", ["k"])
        'invalid api key: ***'
    """
    for secret in secrets:
        if secret:
            text = _replaced(text, secret_spans(text, secret))
    return redact_with(text, tuple(env_secrets()))


def _replaced(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with each of ``spans`` (overlapping ones merged) replaced by ``***``."""
    out, position = [], 0
    for start, end in spans:
        if start >= position:
            out += [text[position:start], "***"]
        position = max(position, end)
    return "".join([*out, text[position:]])


#: The marker ``rafrx.errors`` puts where it clipped a long text.
_CLIPPED = re.compile(r"… \[\d+ more characters\]\Z")

#: The longest start of a secret a cut text may end with: no more than a key's public prefix.
_HARMLESS_PREFIX: Final = 3


def redact_cut(text: str, secrets: Sequence[str]) -> str:
    """:func:`redact` for a text cut short: a secret the cut split leaves its start at
    the end (before a clip marker, if any), which goes too.

    Example:
        >>> redact_cut("the key is sk-12", ["sk-123456"])
        'the key is ***'
        >>> redact_cut("the key is sk-1234… [5 more characters]", ["sk-123456"])
        'the key is ***… [5 more characters]'
    """
    marker = _CLIPPED.search(text)
    head, tail = (text[: marker.start()], marker.group()) if marker else (text, "")
    head = redact(head, secrets)
    at = secret_prefix_at(head, secrets, least=_HARMLESS_PREFIX + 1)
    return (head if at == len(head) else head[:at] + "***") + tail


def redact_error(error: RafrxError, secrets: Sequence[str]) -> RafrxError:
    """``error`` with every secret in its text attributes replaced (see :func:`redact`),
    and, when ``secrets`` are given or it held one, without the exceptions it was
    raised from or during.

    For errors built from what the server sent (an in-band error event or a
    malformed event that echoes the key): message, body, raw data, provider
    fields. Its ``__cause__`` and ``__context__`` (a ``JSONDecodeError`` holds
    the whole event data) cannot be redacted, so they are dropped.

    Example:
        >>> redact_error(RafrxError("bad key sk-123", body="sk-123"), ["sk-123"]).body
        '***'
    """
    changed = any(secrets)
    for name, value in list(vars(error).items()):
        if isinstance(value, str):
            shown = redact_cut(value, secrets)
            changed = changed or shown != value
            setattr(error, name, shown)
    args = tuple(redact_cut(a, secrets) if isinstance(a, str) else a for a in error.args)
    if changed or args != error.args:  # (then what it came from may hold it too)
        error.args = args
        error.__cause__ = error.__context__ = None
        error.__suppress_context__ = True
    return error


def masked_url(url: URL) -> str:
    """``url`` with its password (or a user name alone: a token) and query values
    (which may hold a key) as ``***``.

    Example:
        >>> masked_url(URL("https://me:pw@example.com/v1?key=AIza123"))
        'https://me:***@example.com/v1?key=***'
        >>> masked_url(URL("https://tok-123@example.com/v1"))
        'https://***@example.com/v1'
    """
    if url.password:
        url = url.with_password("***")
    elif url.user:
        url = url.with_user("***")
    if url.query_string:
        url = url.with_query([(name, "***") for name in url.query])
    return str(url)
