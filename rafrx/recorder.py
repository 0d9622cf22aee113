"""Record a stream with its timing, and replay it: the way to share a bug or build a test.

Two formats:

* **JSON lines** (``record`` / ``load`` / ``replay``): one line per item of
  any rafrx observable (updates or result chunks), ``{"t": seconds since
  subscribe, "kind": class name, "fields": {...}}``, then a ``completed`` or
  ``error`` line. Replaying gives back equal items, then the same terminal
  event (the error rebuilt as the same :mod:`rafrx.errors` class).
* **Raw SSE** (``record_sse`` / ``record_http`` / ``load_sse``): the exact
  response bytes in a ``.sse`` file plus a ``.timing.json`` next to it (when
  each chunk arrived, the request and response headers). ``replay`` of a
  ``.sse`` file gives the byte chunks, or updates when a ``dialect`` is named.

Secrets never reach a file: ``Authorization``/``x-api-key`` style headers,
``key=`` URL parameters, bearer tokens, ``sk-...`` keys and the values of
``*_API_KEY``/``*_TOKEN`` environment variables are redacted; so are the
``OpenAI-Organization`` and ``OpenAI-Project`` headers, no credentials but the
ids of the account billed, which a recording shared in a bug report or a public
fixture should not name (no replay needs them). In JSON lines
this holds for a secret that a model streams split over several deltas too:
the deltas are redacted as one text (each LLM call's afresh), a stream that
stops inside a secret hides what it had of it, and a provider block holding
a piece of a split secret (a thinking block) hides that piece. A raw ``.sse``
file keeps the exact bytes, masking only secrets that appear whole in them
(in any JSON escaping). A given secret shorter than 8 characters is redacted
only where it stands as a whole word, not inside every word holding it.

Example:
    >>> import reactivex, tempfile, pathlib
    >>> from rafrx import updates as u, FinishReason
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "turn.jsonl"
    >>> source = reactivex.from_iterable([u.TextDelta("Hi"), u.Finish(FinishReason.STOP)])
    >>> record(source, path).run()
    Finish(finish_reason=<FinishReason.STOP: 'stop'>, usage=None)
    >>> from reactivex import operators as rxops
    >>> replay(path).pipe(rxops.to_list()).run()
    [TextDelta(delta='Hi'), Finish(finish_reason=<FinishReason.STOP: 'stop'>, usage=None)]
"""

from __future__ import annotations

import asyncio
import builtins
import datetime
import json
import math
import os
import threading
import time
import typing
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs
import reactivex
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rafrx import content, errors, events, updates
from rafrx._redaction import (
    REDACTED,
    SECRET_HEADERS,
    DeltaRedactor,
    Settled,
    env_secrets,
    is_secret_header,
    mask_bytes,
    redact,
    redact_cut_short,
    redact_fragments,
    redact_headers,
    redact_with,
    url_secrets,
)
from rafrx.messages import _is_rafrx_mark
from rafrx.response import AgentResponseResult, FinishReason, Usage
from rafrx.sources._guess import dialect_of
from rafrx.sse import SSEDecoder

__all__ = [
    "FORMAT_VERSION",
    "SECRET_HEADERS",
    "Entry",
    "Recording",
    "SSERecording",
    "decode_item",
    "encode_item",
    "encode_value",
    "guess_dialect",
    "load",
    "load_sse",
    "record",
    "record_http",
    "record_sse",
    "redact",
    "redact_headers",
    "replay",
    "sample",
    "samples",
    "timing_path",
]

#: Version written in the header line of JSON-lines and ``.timing.json`` files.
FORMAT_VERSION: Final = 1

# ----------------------------------------------------------------- item codec


def _classes(union: Any) -> dict[str, type]:
    return {cls.__name__: cls for cls in typing.get_args(union)}


T = TypeVar("T")

_TOP: Final[dict[str, type]] = {
    **_classes(updates.AgentResponseUpdate),
    "AgentResponseResult": AgentResponseResult,
}
_NESTED: Final[dict[str, type]] = {
    **_classes(content.Content),
    **_classes(events.Event),
    "Usage": Usage,
    "ResponseMetadata": content.ResponseMetadata,
}


_TAGS: Final = frozenset({"$type", "$dict", "$repr", "$float"})
"""Keys :func:`_decode` reads as tags: a mapping holding one is wrapped in ``$dict``."""


def _encode(value: Any, secrets: tuple[str, ...], *, blocks: bool = False) -> Any:
    """``value`` as JSON-ready data, its strings redacted (``blocks``: provider blocks,
    whose texts may hold a piece of a secret split between them)."""
    if isinstance(value, FinishReason):
        return value.value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float) and not math.isfinite(value):  # no JSON form: tagged
        return {"$float": repr(value)}  # 'inf', '-inf', 'nan'
    if isinstance(value, int | float):  # a PIN given as a number
        return value if redact_with(repr(value), secrets) == repr(value) else REDACTED
    if isinstance(value, str):
        if type(value) is Settled:
            return str(value)
        return redact_fragments(value, secrets) if blocks else redact_with(value, secrets)
    if attrs.has(type(value)) and _NESTED.get(type(value).__name__) is type(value):
        if type(value) is content.ToolCallIncompleteContent:  # its text stops mid-way
            value = attrs.evolve(
                value,
                raw_arguments=redact_cut_short(value.raw_arguments, secrets),
                partial_value=_cut_strings(value.partial_value, secrets),
            )
        return {"$type": type(value).__name__, **_fields(value, secrets)}
    if isinstance(value, list | tuple):
        return [_encode(v, secrets, blocks=blocks) for v in value]
    if isinstance(value, Mapping):
        if _is_rafrx_mark(value):  # rafrx's own mark: its counts
            counts = {k for k, v in value.items() if type(v) is int}  # stay (a PIN's digits)
            return {
                k: v if k in counts else _encode(v, secrets, blocks=blocks)
                for k, v in value.items()
            }
        encoded = {
            redact_with(str(k), secrets): _encode(v, secrets, blocks=blocks)
            for k, v in value.items()
        }
        return {"$dict": encoded} if encoded.keys() & _TAGS else encoded
    return {"$repr": redact_with(repr(value), secrets)}


def _cut_strings(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` with :func:`redact_cut_short` applied to every string in it."""
    if isinstance(value, str):
        return redact_cut_short(value, secrets)
    if isinstance(value, list):
        return [_cut_strings(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: _cut_strings(v, secrets) for k, v in value.items()}
    return value


def _fields(value: Any, secrets: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in attrs.fields(type(value)):
        v = getattr(value, field.name)
        if isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            factory = field.default
            default = factory.factory(value) if factory.takes_self else factory.factory()
        else:
            default = field.default
        if default is not attrs.NOTHING and v == default:
            continue
        out[field.name] = _encode(v, secrets, blocks=field.name == "provider_data")
    return out


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$dict" in value:
        return {k: _decode(v) for k, v in value["$dict"].items()}
    if "$repr" in value:
        return value["$repr"]
    if "$float" in value:
        return float(value["$float"])
    if "$type" in value:
        fields = {k: _decode(v) for k, v in value.items() if k != "$type"}
        return _build(_NESTED[value["$type"]], fields)
    return {k: _decode(v) for k, v in value.items()}


def _build(cls: type, fields: dict[str, Any]) -> Any:
    if isinstance(fields.get("finish_reason"), str):
        fields["finish_reason"] = FinishReason(fields["finish_reason"])
    return cls(**fields)


def encode_item(item: Any, secrets: Iterable[str] = ()) -> tuple[str, dict[str, Any]]:
    """``(kind, fields)``: an item as JSON-ready data (strings redacted).

    Updates and :class:`~rafrx.AgentResponseResult` keep their class name as
    ``kind``; plain JSON values are ``"value"``; anything else is kept as its
    ``repr`` (``"repr"``).

    Example:
        >>> encode_item(updates.ToolCallStart("call_1", "get_weather"))
        ('ToolCallStart', {'id': 'call_1', 'name': 'get_weather'})
    """
    return _encode_item(item, (*secrets, *env_secrets()))


def _encode_item(item: Any, secrets: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    cls = type(item)
    if attrs.has(cls) and _TOP.get(cls.__name__) is cls:
        return cls.__name__, _fields(item, secrets)
    if item is None or isinstance(item, bool | int | float | str | list | dict):
        return "value", {"value": _encode(item, secrets)}
    return "repr", {"repr": redact_with(repr(item), secrets)}


def encode_value(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A rafrx value (content, event, usage …) as JSON-ready data, strings redacted.

    Values of the model are tagged with ``"$type"``; plain JSON passes.

    Example:
        >>> encode_value(content.TextContent("Hi"))
        {'$type': 'TextContent', 'text': 'Hi'}
    """
    return _encode(value, (*secrets, *env_secrets()))


def decode_item(kind: str, fields: Mapping[str, Any]) -> Any:
    """The item :func:`encode_item` encoded as ``(kind, fields)``.

    Example:
        >>> decode_item("TextDelta", {"delta": "Hi"})
        TextDelta(delta='Hi')
    """
    if kind == "value":
        return _decode(fields.get("value"))
    if kind == "repr":
        return fields.get("repr", "")
    if kind not in _TOP:
        raise ValueError(f"unknown recorded item kind {kind!r}")
    return _build(_TOP[kind], {k: _decode(v) for k, v in fields.items()})


def _encode_error(error: BaseException, secrets: tuple[str, ...]) -> dict[str, Any]:
    message = redact_with(errors.error_text(error), secrets)
    state: dict[str, Any] = {"type": type(error).__name__, "message": message}
    base = _rafrx_base(type(error))
    if base is not None and base is not type(error):  # (a subclass of the user's own)
        state["base"] = base.__name__
    for key, value in vars(error).items() if hasattr(error, "__dict__") else ():
        if key in _ERROR_KEYS or not (value is None or isinstance(value, str | int | float)):
            continue  # (an SDK error's own ``type`` is no class name)
        state[key] = _encode(value, secrets)  # (an endless retry_after: tagged)
    return state


def _rafrx_base(cls: type[BaseException]) -> type[errors.RafrxError] | None:
    """The nearest class of :mod:`rafrx.errors` that ``cls`` is (itself, or a base of
    a subclass defined elsewhere: a third party's dialect error), if any."""
    own = (b for b in cls.__mro__ if getattr(errors, b.__name__, None) is b)
    return next((b for b in own if issubclass(b, errors.RafrxError)), None)


#: What an error's recorded state says itself, besides the attributes it keeps.
_ERROR_KEYS = frozenset({"type", "base", "message", "partial"})


def _decode_error(state: Mapping[str, Any]) -> Exception:
    """The error :func:`_encode_error` recorded: its :mod:`rafrx.errors` class (the
    nearest one for a subclass defined elsewhere), or a builtin exception, with its
    message and attributes."""
    name = str(state.get("type", "RafrxError"))
    message = str(state.get("message", ""))
    # (a subclass defined elsewhere has its base recorded: its own name may be one of ours)
    cls = getattr(errors, str(state.get("base", name)), None)
    if isinstance(cls, type) and issubclass(cls, errors.RafrxError):
        err = cls.__new__(cls)
        Exception.__init__(err, message)
        err.__dict__.update({k: _decode(v) for k, v in state.items() if k not in ("type", "base")})
        err.message = message
        err.partial = None
        return err
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        try:
            return builtin(message)
        except TypeError:
            pass
    return errors.RafrxError(f"{name}: {message}")


# ----------------------------------------------------------------- recordings


def _tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(items)


@attrs.frozen
class Entry:
    """One recorded item and when it arrived (seconds after subscribing)."""

    t: float
    item: Any


@attrs.frozen
class Recording:
    """A loaded JSON-lines recording: the entries and how the stream ended.

    ``end`` is the time of the terminal event (``None`` if the stream never
    ended, e.g. it was disposed); ``error`` the error it ended with.
    """

    entries: tuple[Entry, ...] = attrs.field(converter=_tuple)
    end: float | None = None
    error: Exception | None = attrs.field(default=None, eq=False)

    @property
    def items(self) -> list[Any]:
        """The recorded items, without timing."""
        return [e.item for e in self.entries]


def record(
    observable: Observable[T], path: str | os.PathLike[str], *, secrets: Iterable[str] = ()
) -> Observable[T]:
    """``observable``, writing each item it emits to ``path`` (JSON lines).

    Cold like its source: each subscription records again (overwriting the
    file), items pass through unchanged. A delta whose text ends with what
    could be the start of a secret is written once the next deltas of its
    channel (the answer, the reasoning, one call's arguments) tell, so a
    secret split between deltas (or between two text blocks) is redacted as
    a whole, and a key that begins a text block is found whatever ends the
    block before; a stream that stops inside a secret (four characters of it
    or more) ends in ``[REDACTED]``. Secrets are also found escaped as in
    JSON (raw arguments), in mapping keys and as numbers. The file is closed
    when the stream completes, fails or is disposed; a disposed stream has no
    end line, so its :func:`replay` ends with
    :class:`~rafrx.errors.IncompleteStream`.

    Args:
        observable: any rafrx stream (updates or result chunks).
        path: the ``.jsonl`` file to write.
        secrets: strings to redact besides the built-in patterns (one shorter
            than 8 characters only as a whole word).

    Example:
        >>> import reactivex, tempfile
        >>> from reactivex import operators as rx
        >>> path = Path(tempfile.mkdtemp()) / "turn.jsonl"
        >>> turn = [updates.TextDelta("key sk-"), updates.TextDelta("abcdefghijklmnopqrst")]
        >>> _ = record(reactivex.from_iterable(turn), path).run()
        >>> replay(path).pipe(rx.to_list()).run()  # a key split in two
        [TextDelta(delta='key [REDACTED]'), TextDelta(delta='')]
    """
    target = Path(path)
    extra = tuple(secrets)

    def subscribe(
        observer: abc.ObserverBase[T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        hidden = (*extra, *env_secrets())
        redactor = DeltaRedactor(hidden)
        lock = threading.Lock()
        start = time.monotonic()
        file = target.open("w", encoding="utf-8")
        header = {"version": FORMAT_VERSION, "created": _now()}
        _write(file, {"t": 0.0, "kind": "header", "fields": header})

        def elapsed() -> float:
            return round(time.monotonic() - start, 6)

        def write(ready: list[tuple[Any, Any]]) -> None:
            for t, item in ready:
                kind, fields = _encode_item(item, hidden)
                _write(file, {"t": t, "kind": kind, "fields": fields})

        def close(end: Mapping[str, Any] | None = None) -> None:
            with lock:
                if file.closed:
                    return
                try:
                    write(redactor.flush())
                    if end is not None:
                        _write(file, end)
                finally:
                    file.close()

        def on_next(item: Any) -> None:
            with lock:
                if not file.closed:
                    write(redactor.push(elapsed(), item))
            observer.on_next(item)

        def on_error(error: Exception) -> None:
            try:
                close({"t": elapsed(), "kind": "error", "fields": _encode_error(error, hidden)})
            finally:  # (the subscriber hears of the error, whatever befell the file)
                observer.on_error(error)

        def on_completed() -> None:
            close({"t": elapsed(), "kind": "completed"})
            observer.on_completed()

        try:
            upstream = observable.subscribe(on_next, on_error, on_completed, scheduler=scheduler)
        except BaseException:
            file.close()
            raise
        return CompositeDisposable(upstream, Disposable(close))

    return Observable(subscribe)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _write(file: Any, line: Mapping[str, Any]) -> None:
    text = json.dumps(line, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (half an emoji split across deltas)
            text = json.dumps(line, separators=(",", ":"), allow_nan=False)  # a \ud83d escape
    file.write(text + "\n")
    file.flush()


def load(path: str | os.PathLike[str]) -> Recording:
    """Read a JSON-lines recording written by :func:`record`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a line is not a recorded item.
    """
    entries: list[Entry] = []
    end: float | None = None
    error: Exception | None = None
    with Path(path).open(encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                kind, t, fields = data["kind"], float(data["t"]), data.get("fields", {})
                if not math.isfinite(t) or t < 0:
                    raise ValueError(f"time {t} is not a time since the start")
                if kind == "header":
                    continue
                if kind == "completed":
                    end = t
                elif kind == "error":
                    end, error = t, _decode_error(fields)
                else:
                    entries.append(Entry(t, decode_item(kind, fields)))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                # JSON, but not what record() writes: fields of the wrong shape or names
                raise ValueError(f"{path}:{number}: not a recorded item ({exc!r})") from None
            except RecursionError:
                raise ValueError(
                    f"{path}:{number}: not a recorded item (nested too deeply)"
                ) from None
    return Recording(entries, end, error)


# ----------------------------------------------------------------- raw SSE


def timing_path(path: str | os.PathLike[str]) -> Path:
    """The ``.timing.json`` that goes with a ``.sse`` file.

    Example:
        >>> timing_path("streams/turn.sse").as_posix()
        'streams/turn.timing.json'
    """
    p = Path(path)
    return p.with_name(p.stem + ".timing.json") if p.suffix == ".sse" else Path(f"{p}.timing.json")


@attrs.frozen
class SSERecording:
    """A raw recording: byte chunks with arrival times, and what was saved about the exchange."""

    chunks: tuple[tuple[float, bytes], ...] = attrs.field(converter=_tuple)
    meta: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def body(self) -> bytes:
        """All bytes, joined."""
        return b"".join(chunk for _, chunk in self.chunks)

    @property
    def dialect(self) -> str:
        """The recorded dialect, else :func:`guess_dialect` of the body."""
        known = self.meta.get("dialect")
        return str(known) if known else guess_dialect(self.body)


def guess_dialect(body: bytes) -> str:
    """The dialect an SSE body looks like (``openai-chat`` when unsure).

    Example:
        >>> guess_dialect(b'event: message_start\\ndata: {"type": "message_start"}\\n\\n')
        'anthropic'
    """
    # The first events tell, by their names or their JSON "type" (not by any text in
    # them); read as far as that takes (a Responses body's first event echoes the tools).
    decoder = SSEDecoder()
    for start in range(0, len(body), 16384):
        try:
            events = decoder.feed(body[start : start + 16384])
        except errors.LimitExceeded:
            break
        for event in events:
            dialect = dialect_of(event)
            if dialect is not None:
                return dialect
    return "openai-chat"


def _write_sse(
    path: Path, chunks: list[tuple[float, bytes]], meta: Mapping[str, Any], secrets: tuple[str, ...]
) -> None:
    body = mask_bytes(b"".join(c for _, c in chunks), secrets)
    path.write_bytes(body)
    head = json.dumps({"version": FORMAT_VERSION, "created": _now(), **meta}, indent=1)
    rows = ",\n".join(f"  [{round(t, 6)}, {len(c)}]" for t, c in chunks)
    text = f'{head[:-2]},\n "chunks": [\n{rows}\n ]\n}}\n'  # one line per chunk
    timing_path(path).write_text(redact(text, secrets), encoding="utf-8")


def record_sse(
    chunks: AsyncIterable[bytes],
    path: str | os.PathLike[str],
    *,
    meta: Mapping[str, Any] | None = None,
    secrets: Iterable[str] = (),
) -> AsyncIterator[bytes]:
    """Pass ``chunks`` through, saving them to ``path`` (+ ``.timing.json``) at the end.

    The files are written when the iteration ends, however it ends (an
    error's text goes into the timing file as ``"error"``). Secrets found
    whole in the bytes are masked with ``*`` (keeping chunk sizes); one that
    the model streams split over events is not seen in the raw bytes: use
    :func:`record` on the decoded stream to share such a turn.

    Args:
        chunks: The body's bytes, as they come.
        path: The ``.sse`` file to write.
        meta: What the timing file says about the exchange (JSON-ready).
        secrets: More strings to mask.

    Raises:
        TypeError: ``meta`` holds a value JSON cannot hold (a ``ValueError``
            when it holds itself, or sets the file's own ``version``,
            ``created`` or ``chunks``); raised at the call, before ``chunks``
            is read.

    Example:
        >>> async def main(path):
        ...     async def body():
        ...         yield b"data: {}\\n\\n"
        ...     return [chunk async for chunk in record_sse(body(), path)]
    """
    return _record_sse(chunks, Path(path), _timing_meta(meta), tuple(secrets))


#: The timing file's own keys, which ``meta`` cannot set.
_TIMING_KEYS: Final = ("version", "created", "chunks")


def _timing_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``meta`` for a timing file, checked to be JSON-ready and to leave
    the file's own keys alone."""
    info = dict(meta or {})
    taken = [key for key in _TIMING_KEYS if key in info]
    if taken:
        raise ValueError(f"record_sse(meta=...) cannot set the timing file's own {taken}")
    try:
        json.dumps(info)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"record_sse(meta=...) goes into the timing file as JSON: {exc}") from None
    return info


async def _record_sse(
    chunks: AsyncIterable[bytes], target: Path, info: dict[str, Any], hidden: tuple[str, ...]
) -> AsyncIterator[bytes]:
    """:func:`record_sse` once its arguments are checked."""
    seen: list[tuple[float, bytes]] = []
    start = time.monotonic()
    try:
        async for chunk in chunks:
            seen.append((time.monotonic() - start, bytes(chunk)))
            yield chunk
    except Exception as exc:
        text = errors.error_text(exc)
        info["error"] = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        raise
    finally:
        info["end"] = round(time.monotonic() - start, 6)
        _write_sse(target, seen, info, hidden)


async def record_http(
    url: str,
    path: str | os.PathLike[str],
    *,
    json_body: Any = None,
    headers: Mapping[str, str] | None = None,
    method: str = "POST",
    dialect: str | None = None,
    timeout: float = 120.0,
) -> SSERecording:
    """Send one request and save the raw response body with its timing.

    Authorization headers, API keys, key-like URL parameters and OpenAI's
    account ids (``OpenAI-Organization``, ``OpenAI-Project``) are redacted in
    both files. A redirect is recorded, not followed (the credentials stay
    with the host they were meant for).

    Args:
        url: the streaming endpoint (e.g. ``{base_url}/chat/completions``).
        path: the ``.sse`` file to write.
        json_body: the JSON request body.
        headers: request headers (credentials are recorded only as ``[REDACTED]``).
        method: the HTTP method.
        dialect: written to the timing file so a replay knows how to decode.
        timeout: seconds for the whole exchange.

    Returns:
        The recording, as :func:`load_sse` would read it back.

    Raises:
        rafrx.errors.StreamInterrupted: The body broke off; what came is saved.
        rafrx.errors.StreamTimeout: ``timeout`` elapsed; what came of the body,
            if it began, is saved.
        rafrx.errors.TransportError: The request failed otherwise.
    """
    import aiohttp

    request_headers = dict(headers or {})
    secrets = tuple(
        v.split(" ", 1)[-1]
        for k, v in request_headers.items()
        if is_secret_header(k) and len(v.split(" ", 1)[-1]) >= 4
    )
    secrets = (*secrets, *url_secrets(url))  # a password, ?key=…: never written
    meta: dict[str, Any] = {
        "dialect": dialect,
        "request": {
            "method": method,
            "url": redact(url, secrets),
            "headers": redact_headers(request_headers, secrets),
        },
    }
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    target = Path(path)
    shown = redact(url, secrets)
    body_began = False
    try:
        async with (
            aiohttp.ClientSession(timeout=client_timeout) as session,
            # never followed: aiohttp would send an api-key header on to another host
            session.request(
                method, url, json=json_body, headers=request_headers, allow_redirects=False
            ) as response,
        ):
            meta["response"] = {
                "status": response.status,
                "headers": redact_headers(dict(response.headers), secrets),
            }
            body = record_sse(response.content.iter_any(), target, meta=meta, secrets=secrets)
            body_began = True
            async for _ in body:
                pass
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
        message = f"the body from {shown} broke off ({type(exc).__name__}); what came is saved"
        raise errors.StreamInterrupted(redact(message, secrets)) from None
    except TimeoutError:
        saved = "; what came is saved" if body_began else ""
        message = f"recording {shown} timed out after {timeout} s{saved}"
        raise errors.StreamTimeout(redact(message, secrets)) from None
    except aiohttp.ClientError as exc:
        message = f"recording {shown} failed: {type(exc).__name__}: {exc}"
        raise errors.TransportError(redact(message, secrets)) from None
    return load_sse(target)


def load_sse(path: str | os.PathLike[str]) -> SSERecording:
    """Read a ``.sse`` file and its ``.timing.json`` (if any).

    Without a timing file (e.g. a fixture) the whole body is one chunk at
    time 0.
    """
    body = Path(path).read_bytes()
    timing = timing_path(path)
    if not timing.exists():
        return SSERecording([(0.0, body)], {})
    meta = json.loads(timing.read_text(encoding="utf-8"))
    chunks: list[tuple[float, bytes]] = []
    offset = 0
    try:
        if not isinstance(meta, dict):
            raise TypeError(f"expected an object, got {type(meta).__name__}")
        for t, size in meta.pop("chunks", []):
            time_, length = float(t), int(size)
            if not math.isfinite(time_) or time_ < 0 or length < 0:
                raise ValueError(f"chunk ({t}, {size}) is no time and size")
            chunks.append((time_, body[offset : offset + length]))
            offset += length
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{timing}: not a timing file ({exc})") from None
    if offset < len(body):
        chunks.append((chunks[-1][0] if chunks else 0.0, body[offset:]))
    return SSERecording(chunks, meta)


def samples() -> list[str]:
    """The names of the sample recordings shipped with rafrx (``rafrx/data``).

    Example:
        >>> samples()
        ['demo-anthropic.sse', 'demo-openai-chat.sse', 'demo-openai-responses.sse']
    """
    return sorted(p.name for p in _DATA.glob("*.sse"))


def sample(name: str) -> Path:
    """The path of a sample recording shipped with rafrx, e.g. ``demo-openai-chat.sse``.

    The samples are one scripted turn (reasoning, text, a ``get_weather`` and
    a ``write_file`` call) recorded with timing from :class:`rafrx.testing.LLMServer`
    in each wire format.

    Raises:
        FileNotFoundError: no sample has that name.
    """
    if name not in samples():  # a name of the list, never a path elsewhere
        raise FileNotFoundError(f"no sample named {name!r}; there are {samples()}")
    return _DATA / name


_DATA: Final = Path(__file__).resolve().parent / "data"


# ----------------------------------------------------------------- replay


def replay(
    path: str | os.PathLike[str],
    *,
    pacing: bool = False,
    speed: float = 1.0,
    dialect: str | None = None,
) -> Observable[Any]:
    """Replay a recording as a cold observable.

    A ``.jsonl`` recording gives its items, then its terminal event; one
    with none (the recorded stream was cut short: the process stopped, or its
    subscriber disposed) ends with :class:`~rafrx.errors.IncompleteStream`
    after its items. A ``.sse`` file gives its byte chunks, or, with ``dialect`` (``"auto"``
    uses the recorded or guessed one), the updates of
    :func:`rafrx.sources.from_sse`.

    Args:
        path: a file written by :func:`record` or :func:`record_sse`.
        pacing: ``False`` emits everything synchronously on subscribe (no
            event loop needed); ``True`` keeps the recorded timing, on the
            scheduler given to ``subscribe`` or else the running asyncio loop.
        speed: with ``pacing``, how many times faster than recorded.
        dialect: for ``.sse`` files, decode to updates with this dialect; a
            dialect other than ``"auto"`` reads any file as an SSE body.

    Example:
        >>> from rafrx.operators import aggregate, convert
        >>> updates = replay(sample("demo-anthropic.sse"), dialect="auto")
        >>> response = updates.pipe(convert(), aggregate()).run()
        >>> [call.name for call in response.tool_calls]
        ['get_weather', 'write_file']
    """
    if speed <= 0:
        raise ValueError("speed must be > 0")
    file = Path(path)
    if file.suffix.lower() == ".sse" or dialect not in (None, "auto"):  # a named dialect: SSE
        raw = load_sse(file)
        timed: list[tuple[float, Any]] = list(raw.chunks)
        if dialect is None:
            return _timed(timed, None, None, pacing, speed)
        return _decode_sse(raw, raw.dialect if dialect == "auto" else dialect, pacing, speed)
    recording = load(file)
    timed = [(e.t, e.item) for e in recording.entries]
    cut_short = recording.end is None  # no completed or error line
    return _timed(timed, recording.end, recording.error, pacing, speed, cut_short)


def _decode_sse(raw: SSERecording, dialect: str, pacing: bool, speed: float) -> Observable[Any]:
    from rafrx.sources import from_sse

    if not pacing:
        return from_sse([chunk for _, chunk in raw.chunks], dialect=dialect)

    async def paced() -> AsyncIterator[bytes]:
        start = time.monotonic()
        for t, chunk in raw.chunks:
            delay = t / speed - (time.monotonic() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            yield chunk

    return reactivex.defer(lambda _: from_sse(paced(), dialect=dialect))


_CUT_SHORT: Final = "the recording has no end: the recorded stream was cut short"


def _timed(
    items: list[tuple[float, Any]],
    end: float | None,
    error: Exception | None,
    pacing: bool,
    speed: float,
    cut_short: bool = False,
) -> Observable[Any]:
    def finish(observer: abc.ObserverBase[Any]) -> None:
        if error is not None:
            observer.on_error(error)
        elif cut_short:
            observer.on_error(errors.IncompleteStream(_CUT_SHORT))
        else:
            observer.on_completed()

    def subscribe_sync(
        observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        disposed = False

        def dispose() -> None:
            nonlocal disposed
            disposed = True

        for _, item in items:
            if disposed:
                break
            observer.on_next(item)
        if not disposed:
            finish(observer)
        return Disposable(dispose)

    def subscribe_paced(
        observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        sched = scheduler or AsyncIOScheduler(asyncio.get_running_loop())
        start = sched.now
        pending = SerialDisposable()

        def due(t: float) -> float:
            return max(0.0, t / speed - (sched.now - start).total_seconds())

        def emit(index: int) -> Callable[[abc.SchedulerBase, Any], None]:
            def action(_: abc.SchedulerBase, __: Any = None) -> None:
                if index < len(items):
                    observer.on_next(items[index][1])
                    schedule(index + 1)
                else:
                    finish(observer)

            return action

        def schedule(index: int) -> None:
            t = items[index][0] if index < len(items) else (end or (items[-1][0] if items else 0))
            pending.disposable = sched.schedule_relative(due(t), emit(index))

        schedule(0)
        return pending

    return Observable(subscribe_paced if pacing else subscribe_sync)
