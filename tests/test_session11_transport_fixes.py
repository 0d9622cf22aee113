"""Regression tests of session 11's transport fixes: secrets redaction, the client's
credentials, proxy errors and the SSE decoder's event size limit.

Each failed on the commit before its fix, for the reason its docstring gives. Every HTTP
exchange is real aiohttp over 127.0.0.1 (a small aiohttp app of the test's own).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from rafrx import ChatMessage, RafrxError, collect_agent_response
from rafrx._redaction import redact
from rafrx.errors import ConnectTimeout, HTTPStatusError, LimitExceeded, TransportError
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, Timeouts
from rafrx.sse import SSEDecoder
from tests import cut

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """An aiohttp app on 127.0.0.1 answering every path with ``handler``; yields its URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def failure(results: object) -> RafrxError:
    try:
        await collect_agent_response(results)  # type: ignore[arg-type]
    except RafrxError as err:
        return err
    raise AssertionError("the call succeeded")


# ------------------------------------------------------------ 1. short secrets

WRONG_KEY_BODY = {
    "error": {
        "message": "Incorrect API key provided: a. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
    }
}


@pytest.mark.asyncio
async def test_a_one_character_api_key_is_masked_as_a_word_not_inside_every_word() -> None:
    """A one-character key garbles every error text it is redacted from.

    What the user does: calls a local server with ``api_key="a"`` (a placeholder, as
    local servers are given) and the server answers 401 "Incorrect API key provided: a".

    What happens: every ``a`` in the error is ``***`` ("inv***lid_request_error",
    "pl***tform"): the body is no longer JSON, so even the provider's message is lost
    ("HTTP 401").

    What should happen: a secret that short is masked where it stands as a whole word
    (the key the server echoes), not inside other words; a realistic key is still
    masked everywhere.
    """

    async def wrong_key(request: web.Request) -> web.Response:
        return web.json_response(WRONG_KEY_BODY, status=401)

    async with serve(wrong_key) as url:
        client = OpenAIChatClient(url + "/v1", api_key="a", model="m")
        err = await failure(client.stream([ChatMessage.user("Hi")]))
        await client.aclose()
    assert isinstance(err, HTTPStatusError)
    expected = "Incorrect API key provided: ***. You can find your API key at"
    assert expected in str(err)
    assert err.body is not None
    assert "invalid_request_error" in err.body
    assert "platform.openai.com/account" in err.body


def test_a_short_secret_is_redacted_as_a_word_and_a_long_one_everywhere() -> None:
    """The recorder's redaction: ``secrets=["k"]`` turned every ``k`` of a model's text
    into ``[REDACTED]`` ("I [REDACTED]now"); a long secret is still found inside words."""
    assert redact("I know the key: k.", ["k"]) == "I know the key: [REDACTED]."
    assert redact("key=hunter2-hunter2x", ["hunter2-hunter2"]) == "key=[REDACTED]x"


# ------------------------------------------------------------ 2. api_key and URL credentials


def test_an_api_key_beside_credentials_in_base_url_is_refused_when_the_client_is_made() -> None:
    """``OpenAIChatClient("https://user:pass@host/v1", api_key=...)`` failed every request.

    What happens: the client is made, and each call ends in a ``TransportError``
    "Cannot combine AUTHORIZATION header with AUTH argument or credentials encoded in
    URL": aiohttp sends URL credentials as ``Authorization: Basic`` and refuses the key's
    ``Authorization: Bearer`` beside them.

    What should happen: a ``ValueError`` when the client is made, naming the conflict
    and the URL with its password masked; neither secret in it. The same for an
    ``Authorization`` given in ``headers=``.
    """
    url = "https://user:pa55-w0rd-xyz@gateway.example/v1"
    with pytest.raises(ValueError, match="holds credentials and api_key") as caught:
        OpenAIChatClient(url, api_key="sk-0123456789abcdef", model="m")
    assert "pa55-w0rd-xyz" not in str(caught.value)
    assert "sk-0123456789abcdef" not in str(caught.value)
    assert "user:***@gateway.example" in str(caught.value)
    with pytest.raises(ValueError, match="holds credentials and headers="):
        OpenAIChatClient(url, model="m", headers={"authorization": "Bearer t-0123456789"})


@pytest.mark.asyncio
async def test_credentials_in_base_url_go_with_a_key_of_another_header() -> None:
    """No conflict where the key has its own header (Anthropic's ``x-api-key``), or with
    no key: a gateway's Basic credentials in ``base_url`` and the key both arrive."""
    seen: list[tuple[str | None, str | None]] = []

    async def gateway(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Authorization"), request.headers.get("x-api-key")))
        return web.json_response({"error": {"message": "nope"}}, status=401)

    async with serve(gateway) as url:
        with_credentials = url.replace("http://", "http://user:pa55-w0rd-xyz@")
        client = AnthropicClient(with_credentials, api_key="sk-ant-0123456789", model="m")
        err = await failure(client.stream([ChatMessage.user("Hi")]))
        await client.aclose()
    assert isinstance(err, HTTPStatusError)
    assert seen == [("Basic dXNlcjpwYTU1LXcwcmQteHl6", "sk-ant-0123456789")]


# ------------------------------------------------------------ 3. proxy errors

ProxyHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def proxy(handler: ProxyHandler) -> AsyncIterator[int]:
    """A raw TCP server on 127.0.0.1 playing an HTTP proxy with ``handler``; yields its port."""
    writers: list[asyncio.StreamWriter] = []

    async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(serve_one, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def refuse_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")  # (CONNECT api.example.test:443 HTTP/1.1 ...)
    writer.write(
        b"HTTP/1.1 407 Proxy Authentication Required\r\n"
        b'Proxy-Authenticate: Basic realm="corp"\r\nContent-Length: 0\r\n\r\n'
    )
    await writer.drain()


async def say_nothing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # (until the client gives up)


PROXY_PASSWORD = "Pr0xy-S3cret-pw"


async def through_proxy(port: int, monkeypatch: pytest.MonkeyPatch) -> RafrxError:
    """The error of a call to an HTTPS API through the proxy on ``port`` (from the
    environment, with credentials)."""
    monkeypatch.setenv("HTTPS_PROXY", f"http://svc:{PROXY_PASSWORD}@127.0.0.1:{port}")
    for name in ("NO_PROXY", "no_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    timeouts = Timeouts(connect=0.2, first_byte=0.2)
    client = OpenAIChatClient(
        "https://api.example.test/v1", "sk-0123456789abcdef", "m", trust_env=True, timeouts=timeouts
    )
    try:
        return await failure(client.stream([ChatMessage.user("Hi")]))
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_a_proxy_refusing_the_tunnel_is_named_with_its_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the user does: ``trust_env=True`` with ``HTTPS_PROXY`` naming a proxy that
    answers the ``CONNECT`` with 407 Proxy Authentication Required.

    What happens: ``ProtocolError("invalid HTTP response from https://api.example.test/
    ...: ClientHttpProxyError: Proxy Authentication Required")``: a broken server, it
    says, and the API's; no status.

    What should happen: a ``TransportError`` (the connection could not be made) saying
    the proxy refused, naming it by its address without its credentials, with the
    status (not retryable: a 407 comes again).
    """
    async with proxy(refuse_connect) as port:
        err = await through_proxy(port, monkeypatch)
    assert type(err) is TransportError
    said = str(err)
    assert said.startswith(f"the proxy 127.0.0.1:{port} refused the tunnel to https://api.")
    assert "HTTP 407 Proxy Authentication Required" in said
    assert err.status == 407
    assert not err.retryable
    assert PROXY_PASSWORD not in f"{said} {err!r}"
    assert "svc" not in said


@pytest.mark.asyncio
async def test_a_silent_proxy_is_named_in_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A proxy that accepts the connection and never answers the ``CONNECT``: the
    ``ConnectTimeout`` said "no response from https://api.example.test/..." only, and
    the operator looked at the API. It names the proxy too (without credentials)."""
    async with proxy(say_nothing) as port:
        err = await through_proxy(port, monkeypatch)
    assert type(err) is ConnectTimeout
    said = str(err)
    assert f"no response from the proxy 127.0.0.1:{port} or from https://api." in said
    assert PROXY_PASSWORD not in f"{said} {err!r}"
    assert "svc" not in said


# ------------------------------------------------------------ 4. an unfinished data line


def test_an_unfinished_data_line_past_max_event_bytes_fails_at_once() -> None:
    """``SSEDecoder(max_event_bytes=10)`` fed ``data: `` and 50 bytes with no line end
    returned ``[]`` and went on buffering, up to ``max_line_bytes`` (16 MiB by default,
    four times less than the event limit's default, but more than any event limit set
    below it), and ``close()`` then said nothing: the body's end read as a cut stream.

    What should happen: the event's data is past its limit as soon as those bytes are
    in, line end or not: ``LimitExceeded`` for ``max_event_bytes`` then."""
    decoder = SSEDecoder(max_line_bytes=1000, max_event_bytes=10)
    with pytest.raises(LimitExceeded, match="max_event_bytes=10") as caught:
        decoder.feed(b"data: " + b"x" * 50)
    assert caught.value.limit == 10


@pytest.mark.asyncio
async def test_a_body_ending_in_an_oversized_data_line_is_no_incomplete_stream() -> None:
    """End to end: a client with ``max_event_bytes=100`` and a server whose body ends in
    a 500-byte data line with no line end got ``IncompleteStream``, as if the server had
    cut a normal stream; it is the event limit's ``LimitExceeded``."""

    async def oversized(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: " + b"x" * 500)
        await response.write_eof()
        return response

    async with serve(oversized) as url:
        client = OpenAIChatClient(url + "/v1", model="m", max_event_bytes=100)
        err = await failure(client.stream([ChatMessage.user("Hi")]))
        await client.aclose()
    assert type(err) is LimitExceeded
    assert err.limit == 100


def limit_error(chunks: list[bytes], max_line: int, max_event: int) -> tuple[list[str], int | None]:
    """The data of the events a body split into ``chunks`` gives, and the limit of the
    error it ends with (``None``: none)."""
    decoder = SSEDecoder(max_line_bytes=max_line, max_event_bytes=max_event)
    events: list[str] = []
    try:
        for chunk in chunks:
            events += [event.data for event in decoder.feed(chunk)]
            if decoder.error is not None:
                break
        decoder.close()
    except LimitExceeded as err:
        return events, err.limit
    return events, None


@settings(max_examples=80, deadline=None, database=None)
@given(
    before=st.lists(st.integers(0, 12), max_size=3),
    value=st.integers(0, 60),
    space=st.booleans(),
    ended=st.booleans(),
    max_line=st.integers(1, 50),
    max_event=st.integers(1, 50),
    offsets=st.lists(st.integers(0, 120), max_size=6),
)
def test_a_data_line_fails_at_the_first_limit_it_reaches_however_the_body_is_split(
    before: list[int],
    value: int,
    space: bool,
    ended: bool,
    max_line: int,
    max_event: int,
    offsets: list[int],
) -> None:
    """The rule: a data line counts toward its event's size as its bytes arrive. The
    error is the limit the line reaches first, reading it from its start (the event's
    at a tie), whether the line has ended or not, and whatever the chunks."""
    earlier = [f"data: {'y' * n}" for n in before]  # data lines of the same event
    line = "data:" + " " * space + "z" * value
    body = ("".join(f"{each}\n" for each in earlier) + line + "\n" * ended).encode()
    events, limit = limit_error([body], max_line, max_event)
    assert limit_error(cut(body, offsets), max_line, max_event) == (events, limit)
    assert limit_error([bytes([b]) for b in body], max_line, max_event) == (events, limit)
    assert events == []
    # What the rule says, line by line: the first line past a limit decides.
    data_size = 0  # the event's data so far, with a line end after each line
    for text, value_at in [*((each, 6) for each in earlier), (line, 5 + space)]:
        needed = max_event + 1 - data_size  # bytes of this line's value that pass the limit
        event_at = 5 if needed <= 0 else value_at + needed
        event_passed = event_at <= min(len(text), max_line + 1)
        if event_passed or len(text) > max_line:
            assert limit == (max_event if event_passed else max_line)
            return
        data_size += len(text) - value_at + 1
    assert limit is None
