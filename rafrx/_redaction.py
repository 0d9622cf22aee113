"""Secrets out of text: in one string (:func:`redact`), and across a stream's deltas.

A model can stream a secret split over several deltas (``"sk-proj-01"``,
``"23456789…"``); each piece alone looks harmless. :class:`DeltaRedactor`
holds a stream's items back while the text of a delta channel ends with
something that could still grow into a secret, then redacts the joined text
and hands each item back with its own piece of the result.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import netrc
import os
import re
import urllib.request
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import unquote, unquote_plus

import attrs
from yarl import URL

from rafrx import content, updates
from rafrx.events import FinishEvent, ResponseStartedEvent
from rafrx.messages import (
    CUSTOM_TOOL_CALL_REF,
    REASONING_DETAILS,
    TEXT_REF,
    THINKING_BLOCKS,
)
from rafrx.response import AgentResponseResult, FinishReason

#: What a secret becomes in recorded text.
REDACTED: Final = "[REDACTED]"

#: Headers whose values are secrets (lower case); the test server redacts the same set.
#: OpenAI's ``OpenAI-Organization`` and ``OpenAI-Project`` hold no credential but the
#: ids of the account billed: they are kept out of errors, logs and recordings too,
#: which get shared (a bug report, a fixture in a public repository), and no replay
#: needs them.
SECRET_HEADERS: Final = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
    }
)
# Words of a header name that make it a credential (``cf-aig-authorization``,
# ``ocp-apim-subscription-key``, ``helicone-auth``, ``x-session-token`` …);
# ``x-ratelimit-remaining-tokens`` is no credential.
_SECRET_HEADER_WORDS: Final = frozenset(
    {
        "apikey",
        "auth",
        "authentication",
        "authorization",
        "cookie",
        "credential",
        "credentials",
        "key",
        "passwd",
        "password",
        "secret",
        "session",
        "signature",
        "token",
    }
)


def is_secret_header(name: str) -> bool:
    """Whether a header's value is a credential: a known name, or one with a word
    such as ``auth``, ``key``, ``token`` or ``secret``. OpenAI's account ids
    (``OpenAI-Organization``, ``OpenAI-Project``) count as one (see :data:`SECRET_HEADERS`).

    Example:
        >>> [is_secret_header(n) for n in ("cf-aig-authorization", "X-Api-Key", "X-Title")]
        [True, True, False]
        >>> is_secret_header("x-ratelimit-remaining-tokens")
        False
    """
    lower = name.lower()
    return lower in SECRET_HEADERS or not _SECRET_HEADER_WORDS.isdisjoint(
        re.split(r"[-_. ]", lower)
    )


_SECRET_ENV: Final = re.compile(r"(API_KEY|_TOKEN|_SECRET|PASSWORD|APIKEY)$", re.IGNORECASE)
# Where a key may begin: not right after an ASCII letter, digit or "_" (``\b``
# would count CJK text, or a latin-1 reading of UTF-8 bytes, as word characters).
_START: Final = r"(?<![A-Za-z0-9_])"
# URL parameters that carry a credential (Gemini's ?key=, Azure's ?api-key= …).
_SECRET_PARAM: Final = r"(?:(?:x-(?:goog-)?)?api[_-]?key|key|(?:access[_-])?token)"
_PATTERNS: Final = (
    re.compile(_START + r"(?P<s>sk-[A-Za-z0-9_\-]{16,})"),
    re.compile(_START + r"(?P<s>AIza[0-9A-Za-z_\-]{30,})"),
    # (at most 32 blank characters between: a stream may not hold an endless run of them)
    re.compile(r"(?i)" + _START + r"bearer\s{1,32}(?P<s>[A-Za-z0-9._~+/=\-]{8,})"),
    # (not a value masked already: ``?key=***``, as masked_url shows one)
    re.compile(r"(?i)[?&]" + _SECRET_PARAM + r"=(?!\*\*\*)(?P<s>[^&#\s\"']+)"),
)
#: The patterns that may not begin right after a letter, as they match where a text
#: block begins, whatever ends the block before: ``(index in _PATTERNS, pattern)``.
_AT_BLOCK_START: Final = tuple(
    (index, re.compile(p.pattern.replace(_START, "", 1)))
    for index, p in enumerate(_PATTERNS)
    if _START in p.pattern
)


def is_secret_param(name: str) -> bool:
    """Whether a URL query parameter named ``name`` carries a credential.

    Example:
        >>> is_secret_param("key"), is_secret_param("X-Goog-Api-Key"), is_secret_param("alt")
        (True, True, False)
    """
    return _SECRET_PARAM_NAME.fullmatch(name) is not None


_SECRET_PARAM_NAME: Final = re.compile(_SECRET_PARAM, re.IGNORECASE)


def url_secrets(url: str | URL) -> tuple[str, ...]:
    """The credentials in ``url``, in every form they are sent.

    Its password (or, without one, its user name: a token, as in
    ``https://TOKEN@host``) as is, URL-encoded, and in the ``Authorization:
    Basic`` credentials aiohttp makes of ``user:password``; the values of
    secret query parameters (``?key=``, ``?api-key=`` …), decoded and as sent.

    Example:
        >>> url_secrets("http://me:p%40ss@example.com/v1")
        ('p@ss', 'p%40ss', 'bWU6cEBzcw==')
        >>> url_secrets("https://example.com/v1?api-version=1&key=AIza%2B123")
        ('AIza+123', 'AIza%2B123')
        >>> url_secrets("https://tok-123@example.com/v1")
        ('tok-123', 'dG9rLTEyMzo=')
    """
    parsed = URL(url) if isinstance(url, str) else url
    forms: list[str] = []
    for pair in parsed.raw_query_string.split("&"):
        raw_name, _, raw_value = pair.partition("=")
        if is_secret_param(unquote(raw_name)):
            forms += [unquote_plus(raw_value), unquote(raw_value), raw_value]
    password = parsed.password
    if password or parsed.user:
        if password:
            forms += [password, parsed.raw_password or password]
        else:  # (a user name alone is the credential)
            forms += [parsed.user or "", parsed.raw_user or ""]
        credentials = f"{parsed.user or ''}:{password or ''}"
        for encoding in ("latin-1", "utf-8"):  # aiohttp's, and RFC 7617's charset="UTF-8"
            with contextlib.suppress(UnicodeEncodeError):
                forms.append(base64.b64encode(credentials.encode(encoding)).decode("ascii"))
    return tuple(form for form in dict.fromkeys(forms) if form)


def proxy_secrets(proxies: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The credentials of the proxies the environment names (``HTTPS_PROXY``
    …: what a client with ``trust_env`` sends them through), in every form
    they are sent (see :func:`url_secrets`): a proxy's error page may echo them.

    Example:
        >>> proxy_secrets({"https": "http://svc:pw@proxy:3128", "no": "localhost"})
        ('pw', 'c3ZjOnB3')
    """
    given = urllib.request.getproxies() if proxies is None else proxies
    forms: list[str] = []
    for scheme, proxy in given.items():
        if scheme != "no":  # (NO_PROXY: host names, no URL)
            with contextlib.suppress(ValueError):
                forms += url_secrets(proxy) or netrc_secrets(URL(proxy).host)
    return tuple(dict.fromkeys(forms))


def netrc_secrets(host: str | None) -> tuple[str, ...]:
    """The credentials the netrc file (``$NETRC``, else ``~/.netrc``) holds for
    ``host``: what aiohttp sends, with ``trust_env``, a proxy whose URL has none,
    and the API host when no ``Authorization`` is given.

    Its password, and the Basic credentials made of the login and it; an entry
    without a password holds none (a login is no secret: a name like ``api``
    taken for one would be masked in every text it shows in).
    """
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        entry = netrc.netrc(path).authenticators(host) if host else None
    except (OSError, netrc.NetrcParseError):
        return ()
    if entry is None or not entry[2]:
        return ()
    login, account, password = entry
    return login_secrets(login or account or "", password)


def login_secrets(login: str, password: str) -> tuple[str, ...]:
    """The credentials of ``login`` and ``password`` in every form they are sent (see
    :func:`url_secrets`): the password, and the Basic credentials made of both.

    Example:
        >>> login_secrets("svc", "pw")
        ('pw', 'c3ZjOnB3')
    """
    return url_secrets(URL.build(scheme="http", host="host", user=login, password=password))


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The credentials among request headers (``api-key``, ``Authorization``,
    ``cf-aig-authorization`` ...: see :func:`is_secret_header`): each value, its token
    alone when it has a scheme (``Bearer <token>``), and a ``Basic`` one's login in its
    forms (see :func:`login_secrets`): a server may echo the password decoded.

    Example:
        >>> header_secrets({"api-key": "k-123", "Authorization": "Bearer t-456", "X-Env": "p"})
        ('k-123', 'Bearer t-456', 't-456')
        >>> header_secrets({"Authorization": "Basic c3ZjOnB3"})
        ('Basic c3ZjOnB3', 'c3ZjOnB3', 'pw')
    """
    secrets: list[str] = []
    for name, value in headers.items():
        if is_secret_header(name) and value:
            scheme, _, token = value.strip().partition(" ")
            secrets += [value, token.strip()]
            if scheme.lower() == "basic":
                secrets += _basic_login_secrets(token.strip())
    return tuple(secret for secret in dict.fromkeys(secrets) if secret)


def _basic_login_secrets(credentials: str) -> tuple[str, ...]:
    """The login that ``Basic`` ``credentials`` (base64 of ``login:password``) hold, in
    its forms (see :func:`login_secrets`); none if they are not base64 of such a pair."""
    try:
        decoded = base64.b64decode(credentials, validate=True)
    except ValueError:  # (binascii.Error)
        return ()
    try:
        pair = decoded.decode("utf-8")
    except UnicodeDecodeError:  # (aiohttp's BasicAuth encodes latin-1 by default)
        pair = decoded.decode("latin-1")
    login, colon, password = pair.partition(":")
    return login_secrets(login, password) if colon else ()


def secret_forms(secrets: Iterable[str]) -> tuple[str, ...]:
    """Each of ``secrets`` in every form it may come back in: as given, without the
    whitespace around it (an HTTP server strips a header value's), and escaped in
    a JSON string as the encoders do (see :func:`_forms`).

    Example:
        >>> secret_forms(["k-1 ", "a/b"])
        ('k-1 ', 'k-1', 'a/b', 'a\\\\/b')
    """
    given = [form for secret in secrets for form in (secret, secret.strip()) if form]
    return tuple(dict.fromkeys(form for secret in given for form in _forms(secret)))


@functools.lru_cache(maxsize=256)
def _forms(secret: str) -> tuple[str, ...]:
    r"""``secret`` as it may appear in text: as is, and escaped inside a JSON string, as
    Python's ``json`` does (with and without ``ensure_ascii``) and as other encoders
    do: Go's ``json.Marshal`` (``&``, ``<``, ``>`` as ``\u0026`` …), PHP's (``\/``),
    upper-case hex digits.

    Example:
        >>> _forms('a"b/ö')
        ('a"b/ö', 'a\\"b/ö', 'a\\"b/\\u00f6', 'a\\"b\\/ö', 'a\\"b\\/\\u00f6', 'a\\"b/\\u00F6', 'a\\"b\\/\\u00F6')
    """  # noqa: E501
    escaped = [json.dumps(secret, ensure_ascii=False)[1:-1], json.dumps(secret)[1:-1]]
    for form in list(escaped):
        go = form.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
        escaped += [go, form.replace("/", "\\/"), go.replace("/", "\\/")]
    escaped += [_UNICODE_ESCAPE.sub(_upper_hex, form) for form in escaped]
    return tuple(dict.fromkeys((secret, *escaped)))


_UNICODE_ESCAPE: Final = re.compile(r"\\u[0-9a-f]{4}")


def _upper_hex(escape: re.Match[str]) -> str:
    return "\\u" + escape[0][2:].upper()


def _found(
    text: str, secrets: Iterable[str], begin: int = 0, starts: Iterable[int] = ()
) -> list[tuple[int, int, int, int]]:
    """``(match start, secret start, secret end, pattern)`` of each secret in ``text``.

    ``pattern`` is the index in ``_PATTERNS`` of the pattern that found it, or
    -1 for one of ``secrets``.

    Each secret is looked for as is and escaped as in a JSON string (the raw
    arguments of a call); matches of the patterns may overlap. Only matches
    from ``begin`` on count; the characters before are context (where a key
    may begin). A pattern's match can start before its secret: ``Bearer`` is
    part of the match, not of the secret. ``starts`` are where text blocks
    begin in ``text`` (blocks joined): a key may begin there after a letter.
    """
    found: list[tuple[int, int, int, int]] = []
    for secret in secrets:
        for form in _forms(secret) if secret else ():
            found += [(start, start, end, -1) for start, end in secret_spans(text, form, begin)]
    for index, pattern in enumerate(_PATTERNS):
        # Overlapping matches too: a "Bearer x" inside another key's run is one more key.
        match = pattern.search(text, begin)
        while match is not None:
            found.append((match.start(), *match.span("s"), index))
            match = pattern.search(text, match.start() + 1)
    for start in starts:
        if start < begin:
            continue
        for index, pattern in _AT_BLOCK_START:
            match = pattern.match(text, start)
            if match is not None:
                found.append((start, *match.span("s"), index))
    return found


#: Secrets shorter than this are masked only where they stand as a whole word: a
#: short key (``api_key="k"``, ``"ollama"``: what local servers are given) masked
#: inside every word holding it would garble each text it is redacted from.
SHORT_SECRET: Final = 8


def secret_spans(text: str, secret: str, begin: int = 0) -> list[tuple[int, int]]:
    """``(start, end)`` of each occurrence of ``secret`` in ``text`` from ``begin`` on
    (overlapping ones too); one shorter than :data:`SHORT_SECRET` counts only as a
    whole word: not with a letter, digit or ``_`` before or after it that its own
    first or last one would run into.

    Example:
        >>> secret_spans("sk-proj-0123456789", "sk-proj-0123456789")
        [(0, 18)]
        >>> secret_spans("a bad key: k.", "k"), secret_spans("a bad key: k.", "a")
        ([(11, 12)], [(0, 1)])
    """
    pattern = _occurrence(secret)
    spans = []
    match = pattern.search(text, begin)
    while match is not None:
        spans.append(match.span())
        match = pattern.search(text, match.start() + 1)
    return spans


@functools.lru_cache(maxsize=256)
def _occurrence(secret: str) -> re.Pattern[str]:
    """``secret`` as :func:`secret_spans` finds it: a short one only as a whole word."""
    if len(secret) >= SHORT_SECRET:
        return re.compile(re.escape(secret))
    before = r"(?<!\w)" if _WORD.match(secret[0]) else ""
    after = r"(?!\w)" if _WORD.match(secret[-1]) else ""
    return re.compile(before + re.escape(secret) + after)


_WORD: Final = re.compile(r"\w")


def _spans(text: str, secrets: Iterable[str]) -> list[tuple[int, int]]:
    return [(start, end) for _, start, end, _ in _found(text, secrets)]


def env_secrets() -> list[str]:
    """The values of environment variables named like secrets (``*_API_KEY``, ``*_TOKEN`` …)."""
    return [v for k, v in os.environ.items() if _SECRET_ENV.search(k) and len(v) >= 8]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with API keys, bearer tokens and the given ``secrets`` replaced.

    The values of environment variables named like ``*_API_KEY`` or
    ``*_TOKEN`` are always treated as secrets.

    Example:
        >>> redact("Authorization: Bearer abc.def.ghijkl and sk-proj-0123456789abcdefXYZ")
        'Authorization: Bearer [REDACTED] and [REDACTED]'
        >>> redact("the code is hunter2-hunter2", secrets=["hunter2-hunter2"])
        'the code is [REDACTED]'
    """
    return redact_with(text, (*secrets, *env_secrets()))


def redact_with(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with exactly ``secrets`` and the built-in patterns redacted (no environment)."""
    spans = _spans(text, secrets)
    return _piece(text, 0, len(text), _merged(spans)) if spans else text


def redact_cut_short(text: str, secrets: tuple[str, ...]) -> str:
    """:func:`redact_with` for a text cut short (a tool call's arguments when the stream
    stopped): a secret it ends inside of, by 4 characters or more, is hidden too, as
    :class:`StreamRedactor` hides one a stream ends in.

    Example:
        >>> redact_cut_short('{"key": "hunter2-hun', ("hunter2-hunter2",))
        '{"key": "[REDACTED]'
    """
    spans = _spans(text, secrets)
    at = secret_prefix_at(text, secrets, 0, least=_LEAST_PREFIX)
    if at < len(text):
        spans.append((at, len(text)))
    return _piece(text, 0, len(text), _merged(spans)) if spans else text


def redact_fragments(text: str, secrets: tuple[str, ...]) -> str:
    """:func:`redact_cut_short`, and a secret's end that ``text`` begins with (by 4
    characters or more) hidden too: a text that a secret was split across (an item
    of a stream whose deltas were redacted joined: a thinking block, a message).

    Example:
        >>> redact_fragments("hunter2 then go", ("hunter2-hunter2",))
        '[REDACTED] then go'
    """
    text = redact_cut_short(text, secrets)
    size = 0
    for secret in secrets:
        for form in _forms(secret):
            for n in range(min(len(form) - 1, len(text)), max(size, _LEAST_PREFIX - 1), -1):
                if text.startswith(form[-n:]):
                    size = n
                    break
    return REDACTED + text[size:] if size else text


def mask_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """Redact ``data`` keeping its length (``*`` per byte), so chunk offsets stay valid."""
    text = data.decode("latin-1")  # one char per byte: lengths are preserved
    needles = [  # each form of each secret, as its UTF-8 bytes read one char per byte
        form.encode().decode("latin-1")
        for secret in (*secrets, *env_secrets())
        if secret
        for form in _forms(secret)
    ]
    spans = _spans(text, needles)
    if not spans:
        return data
    masked = bytearray(data)
    for start, end in spans:
        masked[start:end] = b"*" * (end - start)
    return bytes(masked)


def redact_headers(headers: Mapping[str, str], secrets: Iterable[str] = ()) -> dict[str, str]:
    """A copy of ``headers`` with credentials replaced by ``[REDACTED]``.

    Example:
        >>> redact_headers({"Authorization": "Bearer x", "Accept": "text/event-stream"})
        {'Authorization': '[REDACTED]', 'Accept': 'text/event-stream'}
    """
    secrets = tuple(secrets)
    return {
        k: REDACTED if is_secret_header(k) else redact(str(v), secrets) for k, v in headers.items()
    }


# ------------------------------------------------------------ across deltas

#: What, at the very end of a text, could still grow into a match of ``_PATTERNS``.
_OPEN_PATTERNS: Final = (
    re.compile(_START + r"s(?:k(?:-[A-Za-z0-9_\-]*)?)?\Z"),
    re.compile(_START + r"A(?:I(?:z(?:a[0-9A-Za-z_\-]*)?)?)?\Z"),
    re.compile(
        r"(?i)" + _START + r"b(?:e(?:a(?:r(?:e(?:r(?:\s{1,32}[A-Za-z0-9._~+/=\-]*)?)?)?)?)?)?\Z"
    ),
    # (a parameter's name still growing, up to x-goog-api-key's 14 letters, or its value)
    re.compile(r"(?i)[?&](?:[a-z_-]{0,14}|" + _SECRET_PARAM + r"=[^&#\s\"']*)\Z"),
)
#: The same at a text block's start (see ``_AT_BLOCK_START``).
_OPEN_AT_BLOCK_START: Final = tuple(
    re.compile(p.pattern.replace(_START, "", 1)) for p in _OPEN_PATTERNS if _START in p.pattern
)

#: A short complete match of each of ``_PATTERNS``: the context that lets a key
#: which is still growing be matched on, without holding its whole run.
_STAND_INS: Final = ("sk-" + "x" * 16, "AIza" + "x" * 30, "bearer xxxxxxxx", "?key=x")


def secret_prefix_at(text: str, secrets: Iterable[str], begin: int = 0, least: int = 1) -> int:
    """Where the longest tail of ``text`` that is a proper prefix of a secret starts.

    Only tails from ``begin`` on and of at least ``least`` characters count;
    ``len(text)`` when there is none.
    """
    at = len(text)
    for secret in secrets:
        for form in _forms(secret):
            for size in range(min(len(form) - 1, len(text) - begin), least - 1, -1):
                if text.endswith(form[:size]):
                    at = min(at, len(text) - size)
                    break
    return at


def _short_secret_at_end(text: str, secrets: Iterable[str], begin: int = 0) -> int:
    """Where a short secret standing as a word at the end of ``text`` starts (from
    ``begin`` on): a letter, digit or ``_`` coming next would make it part of a
    longer word, no secret (see :func:`secret_spans`); ``len(text)`` if none.

    Example:
        >>> _short_secret_at_end("my pw", ["pw"]), _short_secret_at_end("a cpw", ["pw"])
        (3, 5)
    """
    at = len(text)
    for secret in secrets:
        for form in _forms(secret) if secret else ():
            start = len(text) - len(form)
            if (
                len(form) < SHORT_SECRET
                and start >= begin
                and _WORD.match(form[-1])
                and _occurrence(form).match(text, start)
            ):
                at = min(at, start)
    return at


def _open_at(
    text: str,
    secrets: Iterable[str],
    begin: int = 0,
    keys: Iterable[int] = (),
    starts: Iterable[int] = (),
) -> int:
    """Where the tail of ``text`` that could still grow into a secret starts.

    ``len(text)`` when no suffix from ``begin`` on could begin a secret. A
    tail starting at one of ``keys`` (a complete key, growing) does not count.
    ``starts``: where text blocks begin (see :func:`_found`).
    """
    at = min(secret_prefix_at(text, secrets, begin), _short_secret_at_end(text, secrets, begin))
    for pattern in _OPEN_PATTERNS:
        match = pattern.search(text, begin)
        while match is not None and match.start() in keys:  # a later start may still be open
            match = pattern.search(text, match.start() + 1)
        if match is not None:
            at = min(at, match.start())
    for start in starts:
        if begin <= start < at and start not in keys:
            at = start if any(p.match(text, start) for p in _OPEN_AT_BLOCK_START) else at
    return at


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


class Settled(str):
    """A delta's text already redacted across the stream: not to be redacted again alone.

    Alone, the piece could look like a secret that the joined text is not (a
    ``sk-…`` that follows a letter in the delta before).
    """

    __slots__ = ()


def _piece(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> str:
    """``text[start:end]`` redacted: a secret's marker goes where the secret begins."""
    out: list[str] = []
    position = start
    for first, last in spans:
        if last <= start or first >= end:
            continue
        if first >= start:
            out.append(text[position:first])
            out.append(REDACTED)
        position = max(position, min(last, end))
    out.append(text[position:end])
    return "".join(out)


_LEAST_PREFIX: Final = 4  # a stream ending in this much of a secret ends redacted

# A channel is one stream of deltas whose texts join up: the answer, the
# reasoning, one call's raw arguments, one string argument's decoded value.
# The answer's (and the reasoning's) blocks join up too: a secret may straddle
# two of them, and where one begins, so may a key, whatever ends the one before.
_Channel = tuple[Any, ...]
_BLOCK_CHANNELS: Final = (("text",), ("reasoning",))

#: The blocks an OpenAI chat stream may send in the middle of its one text (with
#: reasoning, or beside a call): they end no text block.
_MID_TEXT_BLOCKS: Final = frozenset(
    {"tool_call_extra", THINKING_BLOCKS, REASONING_DETAILS, CUSTOM_TOOL_CALL_REF}
)


def _ends_block(item: Any) -> bool:
    """Whether ``item`` (an update or a content) comes between two text blocks.

    Anthropic's blocks and the Responses API's output items come one after
    the other: a block kept for the provider (a server tool's, a thinking
    block, a mark of where a block stood) or a call's end means that the text
    before it is over, and that the text after it begins a block.

    Example:
        >>> _ends_block(updates.ReasoningDelta("", provider_data={"type": "web_search_call"}))
        True
        >>> _ends_block(updates.TextDelta("Hi"))
        False
    """
    if type(item) in (updates.ToolCallEnd, content.ToolCallEndContent):
        return True
    if isinstance(item, updates.ReasoningDelta | content.ReasoningContent):
        block = item.provider_data
        return isinstance(block, Mapping) and block.get("type") not in _MID_TEXT_BLOCKS
    return False


def _pieces(item: Any) -> list[tuple[_Channel, str]]:
    """The delta texts in ``item``, each with its channel."""
    if isinstance(item, AgentResponseResult):
        return [piece for c in item.contents for piece in _pieces(c)]
    match item:
        case updates.TextDelta():
            return [(("text",), item.delta)]
        case content.TextContent():
            return [(("text",), item.text)]
        case updates.ReasoningDelta():
            return [(("reasoning",), item.delta)]
        case content.ReasoningContent():
            return [(("reasoning",), item.text)]
        case updates.ToolCallDelta():
            return [(("call", item.index), item.arguments_delta)]
        case updates.ToolCallArgs():
            return [(("args", item.id), item.args_delta)]
        case content.ToolCallArgsContent():
            return [(("args", item.call_id), item.args_delta)]
        case content.ToolCallArgsProgressContent():
            return [(("value", item.call_id, item.name), item.value)]
    return []


def _with_pieces(item: Any, texts: list[str]) -> Any:
    """``item`` with the texts of :func:`_pieces` replaced, in order."""
    if isinstance(item, AgentResponseResult):
        rest = iter(texts)
        contents = [
            _with_pieces(c, [next(rest) for _ in _pieces(c)]) if _pieces(c) else c
            for c in item.contents
        ]
        return attrs.evolve(item, contents=contents)
    (text,) = texts
    match item:
        case updates.TextDelta() | updates.ReasoningDelta():
            return attrs.evolve(item, delta=text)
        case content.TextContent() | content.ReasoningContent():
            return attrs.evolve(item, text=text)
        case updates.ToolCallDelta():
            return attrs.evolve(item, arguments_delta=text)
        case updates.ToolCallArgs() | content.ToolCallArgsContent():
            return attrs.evolve(item, args_delta=text)
        case content.ToolCallArgsProgressContent():
            return attrs.evolve(item, value=text)
    raise TypeError(f"no delta text in {type(item).__name__}")  # pragma: no cover


@attrs.define(eq=False)
class _Held:
    """An item waiting for the channels of its pieces to settle."""

    stamp: Any
    item: Any
    texts: list[str | None]
    waiting: int


@attrs.define(eq=False)
class _Pending:
    """A channel's text not yet settled, and the pieces it is made of."""

    before: str = ""  # settled text kept as context: where a key may begin, or continue
    resume: tuple[int, ...] = ()  # where in ``before`` keys begin that may go on in ``text``
    text: str = ""
    owners: list[tuple[_Held, int, int, int]] = attrs.Factory(list)  # held, piece, start, end
    starts: list[int] = attrs.Factory(list)  # where blocks begin in ``before + text``


class DeltaRedactor:
    """Redacts secrets that a stream splits between its items' deltas.

    :meth:`push` takes each item (with any ``stamp``, e.g. its time) and
    returns the ``(stamp, item)`` pairs now safe to write, in order, their
    delta texts redacted across item boundaries; :meth:`flush` the rest when
    the stream ends. Other strings are left for :func:`redact`.

    Example:
        >>> from rafrx import updates as u
        >>> r = DeltaRedactor(["hunter2-hunter2"])
        >>> r.push(0, u.TextDelta("the code is hunter"))
        []
        >>> [item for _, item in r.push(1, u.TextDelta("2-hunter2, ok"))]
        [TextDelta(delta='the code is [REDACTED]'), TextDelta(delta=', ok')]
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets = tuple(s for s in secrets if s)
        self._queue: deque[_Held] = deque()
        self._channels: dict[_Channel, _Pending] = {}
        self._text_refs = _TextRefs()
        self._new_block: set[_Channel] = set()  # channels whose next piece begins a block

    def push(self, stamp: Any, item: Any) -> list[tuple[Any, Any]]:
        """Take ``item``; return the items that are ready, oldest first.

        An LLM call that finished whole (``STOP``, ``TOOL_CALLS``) ends its texts
        where they are: what ends like a secret's start is no secret cut short. The
        next LLM call's texts start afresh, their context not the last call's.
        """
        if _starts_call(item):
            ready = self._settle_all(cut_short=False)
            self._channels.clear()
            self._text_refs = _TextRefs()
            return ready + self._push(stamp, item)
        ready = self._push(stamp, item)
        reason = _finish_reason(item)
        if reason is not None:  # (a call cut short, by max_tokens or else, may end in one)
            ready += self._settle_all(cut_short=reason not in _WHOLE)
        return ready

    def _push(self, stamp: Any, item: Any) -> list[tuple[Any, Any]]:
        pieces, blocks = self._pieces_with_starts(item)
        held = _Held(stamp, item, [None] * len(pieces), len(pieces))
        self._queue.append(held)
        touched: list[_Pending] = []
        for index, (channel, text) in enumerate(pieces):
            pending = self._channels.setdefault(channel, _Pending())
            if index in blocks and (pending.text or pending.before):
                pending.starts.append(len(pending.before) + len(pending.text))
            end = len(pending.text) + len(text)
            pending.owners.append((held, index, len(pending.text), end))
            pending.text += text
            if pending not in touched:
                touched.append(pending)
        for pending in touched:
            self._settle(pending, final=False)
        return self._ready()

    def _pieces_with_starts(self, item: Any) -> tuple[list[tuple[_Channel, str]], set[int]]:
        """:func:`_pieces` of ``item``, and which of them begin a text (or a reasoning)
        block."""
        contents = item.contents if isinstance(item, AgentResponseResult) else (item,)
        pieces: list[tuple[_Channel, str]] = []
        starts: set[int] = set()
        for each in contents:
            if _ends_block(each):
                self._new_block.update(_BLOCK_CHANNELS)
            for channel, text in _pieces(each):
                if channel in self._new_block:
                    self._new_block.discard(channel)
                    starts.add(len(pieces))
                pieces.append((channel, text))
        return pieces, starts

    def flush(self) -> list[tuple[Any, Any]]:
        """The stream ended: every held item, redacted with what is known."""
        return self._settle_all(cut_short=True)

    def _settle_all(self, *, cut_short: bool) -> list[tuple[Any, Any]]:
        """No more text comes: settle every channel (``cut_short``: perhaps in the
        middle of a secret) and return every held item."""
        for pending in self._channels.values():
            self._settle(pending, final=True, cut_short=cut_short)
        return self._ready()

    def _settle(self, pending: _Pending, *, final: bool, cut_short: bool = True) -> None:
        base = len(pending.before)
        text = pending.before + pending.text
        found = _found(text, self._secrets, base, pending.starts)
        if pending.resume:  # and the keys begun in the context, found again with their end
            again = _found(text, self._secrets, 0, pending.starts)
            found += [f for f in again if f[0] in pending.resume and f[0] < base]
        if final and cut_short:  # the text ends inside a secret (the stream stopped there)
            at = secret_prefix_at(text, self._secrets, base, least=_LEAST_PREFIX)
            found.append((at, at, len(text), -1))  # (hide that much)
        spans = _merged((s - base, e - base) for _, s, e, _ in found if e > s)
        # A complete key at the end may still grow, but the pieces it covers already
        # read the same whatever comes: they need not wait for its end.
        growing = {m: p for m, _, e, p in found if p >= 0 and e == len(text)}
        limit = len(pending.text)
        if not final:
            limit = _open_at(text, self._secrets, base, growing, pending.starts) - base
        count, cut = 0, 0
        for _, _, _, end in pending.owners:
            if end > limit:
                break
            count, cut = count + 1, end
        for held, index, start, end in pending.owners[:count]:
            held.texts[index] = Settled(_piece(pending.text, start, end, spans))
            held.waiting -= 1
        if not count:
            return
        settled = pending.before + pending.text[:cut]
        crossing = [m for m, _, e, _ in found if m < base + cut < e]
        kept = 0  # of the blocks' starts, the first still in view: in the new context or after
        if growing and cut == len(pending.text) and not final:
            # (its last character is the real one: what follows sees the same neighbour)
            stand_in = _STAND_INS[growing[min(growing)]][:-1] + settled[-1]
            pending.before, pending.resume = stand_in, (0,)
            kept = len(settled)  # (the context is made up: a block starts in none of it)
        elif crossing:  # keep the matches' start in view, so that they are found again
            first = min(crossing)
            pending.before = settled[first:]
            pending.resume = tuple(m - first for m in crossing)
        else:
            pending.before, pending.resume = settled[-1:], ()
        pending.text = pending.text[cut:]
        pending.owners = [(h, i, s - cut, e - cut) for h, i, s, e in pending.owners[count:]]
        if pending.starts:
            shift = len(settled) - len(pending.before)
            kept = max(kept, shift)
            pending.starts = [p - shift for p in pending.starts if p >= kept]

    def _ready(self) -> list[tuple[Any, Any]]:
        out: list[tuple[Any, Any]] = []
        while self._queue and not self._queue[0].waiting:
            held = self._queue.popleft()
            item = held.item
            if held.texts:
                texts = [t for t in held.texts if t is not None]
                self._text_refs.passed(_pieces(item), texts)
                item = _with_pieces(item, texts)
            out.append((held.stamp, self._text_refs.recounted(item)))
        return out


def _starts_call(item: Any) -> bool:
    """Whether ``item`` starts an LLM call (of an agent's turn)."""
    return isinstance(item, AgentResponseResult) and any(
        type(e) is ResponseStartedEvent for e in item.events
    )


def _finish_reason(item: Any) -> FinishReason | None:
    """Why an LLM call finished, if ``item`` says it did."""
    if isinstance(item, AgentResponseResult):
        ends = [e.finish_reason for e in item.events if type(e) is FinishEvent]
        return ends[-1] if ends else None
    return item.finish_reason if type(item) is updates.Finish else None


_WHOLE: Final = frozenset({FinishReason.STOP, FinishReason.TOOL_CALLS})  # nothing cut short


class _TextRefs:
    """Recounts the ``chars`` of Anthropic's :data:`~rafrx.messages.TEXT_REF` marks
    (where each text block stood among server blocks) for the redacted text.

    The marks count the text block by block, in order, and come after the text they
    count; a block ends with a delta. Only the deltas that redaction lengthened or
    shortened are remembered.
    """

    __slots__ = ("_mark", "_shift", "_shifts", "_written")

    def __init__(self) -> None:
        self._written = 0  # characters of text written out, as streamed
        self._mark = 0  # where the next mark's text begins, as streamed
        self._shift = 0  # the redacted text's length less the streamed one's, there
        self._shifts: deque[tuple[int, int]] = deque()  # (end, shift): since the mark

    def passed(self, pieces: list[tuple[_Channel, str]], texts: list[str]) -> None:
        """Deltas written out: their streamed and their redacted texts."""
        for (channel, raw), text in zip(pieces, texts, strict=True):
            if channel != ("text",):
                continue
            self._written += len(raw)
            if len(text) != len(raw):
                shift = self._shifts[-1][1] if self._shifts else self._shift
                self._shifts.append((self._written, shift + len(text) - len(raw)))

    def recounted(self, item: Any) -> Any:
        """``item``, a text mark in it counting the redacted text."""
        if isinstance(item, AgentResponseResult):
            contents = [self.recounted(c) for c in item.contents]
            changed = any(a is not b for a, b in zip(contents, item.contents, strict=True))
            return attrs.evolve(item, contents=contents) if changed else item
        if not isinstance(item, updates.ReasoningDelta | content.ReasoningContent):
            return item
        mark = item.provider_data
        if not isinstance(mark, Mapping) or mark.get("type") != TEXT_REF:
            return item
        chars = mark.get("chars")
        if type(chars) is not int:
            return item
        self._mark += chars
        shift = self._shift
        while self._shifts and self._shifts[0][0] <= self._mark:
            shift = self._shifts.popleft()[1]
        if shift == self._shift:
            return item
        mark = {**mark, "chars": chars + shift - self._shift}
        self._shift = shift
        return attrs.evolve(item, provider_data=mark)
