"""Regression tests of transport bugs earlier hunts suspected (session 10, helper A):
retries nobody sees, a long error body that loses the provider's error, the ``rafrx``
logger without its ``NullHandler``, a proxy that cannot be reached named as the target,
a call cut by its client without its request id, and a ``.netrc`` login taken for a secret.

Each failed on the commit before its fix, for the reason its docstring gives. Every HTTP
exchange is real aiohttp over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import socket
import subprocess
import sys
from typing import Any

import pytest

from rafrx import ChatMessage, collect_agent_response, convert
from rafrx import updates as u
from rafrx._redaction import proxy_secrets
from rafrx.errors import HTTPStatusError, RafrxError, TransportError
from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, RetryPolicy
from rafrx.testing import Fault, LLMServer, Replay, Reply

USER = [ChatMessage.user("hi")]
KEY = "sk-session10-0123456789abcdef"


async def _error(client: Any) -> RafrxError:
    try:
        response = await collect_agent_response(client.stream(USER).pipe(convert()))
    except RafrxError as err:
        return err
    raise AssertionError(f"no error: {response!r}")


def _closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# ---------------------------------------------------------------- 1. retries are logged


@pytest.mark.asyncio
async def test_each_retry_is_logged_with_its_attempt_reason_and_delay(
    llm_server: LLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    """What the user does: a service sets ``retry=RetryPolicy(...)``; the provider
    answers 429 once, then streams the reply.

    What happened: the call succeeds after a wait, and nothing anywhere says it was
    retried: the operator cannot see rate limiting (nor why calls got slow) in the logs.

    What should happen: each retry is logged on the transport's module logger (INFO,
    as openai-python logs "Retrying request to ... in N seconds"), naming the attempt
    that failed, why (the status, or the error's class) and the delay; never the key,
    in a header or in the URL's query.
    """
    llm_server.enqueue(Fault.status(429, message="Rate limit reached"), Reply(text="Hello"))
    retry = RetryPolicy(max_attempts=3, initial_backoff=0.01, jitter=False)
    url = llm_server.url + "/v1?key=url-key-9876"  # (a key in the URL: Gemini's form)
    caplog.set_level(logging.INFO, logger="rafrx")
    async with OpenAIChatClient(url, api_key=KEY, model="m", retry=retry) as client:
        response = await collect_agent_response(client.stream(USER).pipe(convert()))
    assert response.text == "Hello"
    retries = [r for r in caplog.records if "retrying" in r.getMessage().lower()]
    assert len(retries) == 1, caplog.text
    (record,) = retries
    assert record.name.startswith("rafrx.sources")
    assert record.levelno == logging.INFO
    said = record.getMessage()
    assert "429" in said
    assert "attempt 1" in said
    assert "0.01" in said  # the delay, in seconds
    assert "/chat/completions" in said
    assert KEY not in caplog.text
    assert "url-key-9876" not in caplog.text


@pytest.mark.asyncio
async def test_a_retried_connect_failure_is_logged_by_its_error_class(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refused connection retried: the log says it was a ``TransportError``."""
    port = _closed_port()
    retry = RetryPolicy(max_attempts=2, initial_backoff=0.01, jitter=False)
    caplog.set_level(logging.INFO, logger="rafrx")
    async with OpenAIChatClient(f"http://127.0.0.1:{port}", api_key=KEY, retry=retry) as client:
        err = await _error(client)
    assert isinstance(err, TransportError)
    retries = [r for r in caplog.records if "retrying" in r.getMessage().lower()]
    assert len(retries) == 1, caplog.text
    assert "TransportError" in retries[0].getMessage()
    assert KEY not in caplog.text


# ---------------------------------------------------------------- 2. long error bodies


PADDING = "x" * 100_000


@pytest.mark.asyncio
async def test_an_error_body_over_the_read_limit_keeps_the_providers_error(
    llm_server: LLMServer,
) -> None:
    """What happens: a provider (or a gateway) answers 400 with its JSON error first and
    100 KB of more fields after it. rafrx reads the first 64 KB (``MAX_ERROR_BODY``), so
    the JSON is cut, ``json.loads`` fails, and the error's ``provider_message``,
    ``error_type`` and ``code`` are ``None``: ``str(err)`` is a bare "HTTP 400".

    What should happen: the fields come from the cut JSON (rafrx's own partial JSON
    parser reads a prefix), as they would from the whole body.
    """
    body = {
        "error": {
            "message": "Invalid 'messages[3]': too long.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        },
        "padding": PADDING,
    }
    llm_server.enqueue(Fault.status(400, body=body))
    async with OpenAIChatClient(llm_server.url, api_key=KEY, model="m") as client:
        err = await _error(client)
    assert isinstance(err, HTTPStatusError)
    assert err.provider_message == "Invalid 'messages[3]': too long."
    assert (err.error_type, err.code) == ("invalid_request_error", "context_length_exceeded")
    assert str(err) == "HTTP 400: Invalid 'messages[3]': too long."


@pytest.mark.asyncio
async def test_a_huge_error_message_is_cut_but_keeps_the_type_and_code_before_it(
    llm_server: LLMServer,
) -> None:
    """The message itself is over the limit: it comes cut, and the type and code that
    came before it are kept."""
    body = {
        "error": {
            "type": "invalid_request_error",
            "code": "bad_input",
            "message": "Bad input: " + PADDING,
        }
    }
    llm_server.enqueue(Fault.status(400, body=body))
    async with OpenAIChatClient(llm_server.url, api_key=KEY, model="m") as client:
        err = await _error(client)
    assert isinstance(err, HTTPStatusError)
    assert (err.error_type, err.code) == ("invalid_request_error", "bad_input")
    assert err.provider_message is not None
    assert err.provider_message.startswith("Bad input: xxx")
    assert str(err).startswith("HTTP 400: Bad input: xxx")


@pytest.mark.asyncio
async def test_a_whole_but_invalid_error_body_is_still_no_provider_error(
    llm_server: LLMServer,
) -> None:
    """A short body that is not JSON (only a prefix of it) is not read as a cut one."""
    llm_server.enqueue(Fault.status(400, body=b'{"error": {"message": "half'))
    async with OpenAIChatClient(llm_server.url, api_key=KEY, model="m") as client:
        err = await _error(client)
    assert isinstance(err, HTTPStatusError)
    assert err.provider_message is None
    assert err.body == '{"error": {"message": "half'


# ---------------------------------------------------------------- 3. NullHandler


def test_the_rafrx_logger_has_a_null_handler() -> None:
    """A library adds a ``NullHandler`` to its top logger (the logging HOWTO,
    "Configuring Logging for a Library"): rafrx had none."""
    import rafrx  # noqa: F401

    handlers = logging.getLogger("rafrx").handlers
    assert any(type(h) is logging.NullHandler for h in handlers), handlers


def test_an_unconfigured_program_gets_no_rafrx_warning_on_stderr() -> None:
    """Without it, a program that configures no logging gets rafrx's warnings printed on
    stderr by Python's last-resort handler (``logging.lastResort``)."""
    code = (
        "import logging, rafrx\n"
        "logging.getLogger('rafrx.sources._http').warning('rafrx-warning-shown')\n"
        "logging.getLogger('elsewhere').warning('other-warning-shown')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "rafrx-warning-shown" not in done.stderr
    assert "other-warning-shown" in done.stderr  # (the program's own still are)


# ---------------------------------------------------------------- 4. proxy unreachable


@pytest.mark.asyncio
async def test_an_unreachable_proxy_is_named_not_the_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the user does: ``trust_env=True`` with ``HTTP_PROXY`` naming a proxy that is
    down.

    What happened: ``TransportError("cannot connect to http://api.example.test/...:
    [Errno 111] Connect call failed ('127.0.0.1', 9)")``: it names the API, which is
    fine, and the operator looks there.

    What should happen: the same error class, saying that the proxy could not be
    reached, with its address and without its credentials.
    """
    port = _closed_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://svc:Pr0xyS3cret@127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = OpenAIChatClient("http://api.example.test", api_key=KEY, model="m", trust_env=True)
    try:
        err = await _error(client)
    finally:
        await client.aclose()
    assert type(err) is TransportError
    assert err.retryable
    said = str(err)
    assert "proxy" in said
    assert f"127.0.0.1:{port}" in said
    assert "Pr0xyS3cret" not in f"{said} {err!r}"
    assert "svc" not in said


@pytest.mark.asyncio
async def test_an_unreachable_target_without_a_proxy_is_named_as_before() -> None:
    port = _closed_port()
    async with OpenAIChatClient(f"http://127.0.0.1:{port}", api_key=KEY, model="m") as client:
        err = await _error(client)
    assert type(err) is TransportError
    assert str(err).startswith(f"cannot connect to http://127.0.0.1:{port}/")
    assert "proxy" not in str(err)


# ---------------------------------------------------------------- 5. cuts and request ids


ANTHROPIC_BODY = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_01","type":"message",'
    b'"role":"assistant","model":"claude-x","content":[],"stop_reason":null,'
    b'"usage":{"input_tokens":12,"output_tokens":1}}}\n\n'
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}\n\n'
)
ANTHROPIC_END = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


async def _wait_for_text(seen: list[Any]) -> None:
    for _ in range(200):
        if any(isinstance(x, u.TextDelta) for x in seen):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"no text came: {seen}")


@pytest.mark.asyncio
async def test_a_call_ended_by_the_clients_aclose_keeps_its_request_id(
    llm_server: LLMServer,
) -> None:
    """What the user does: a service closes its client (``aclose()``, at shutdown) while
    a call streams; the call ends with ``TransportError("client closed: ...")``.

    What happened: its ``request_id`` is ``None``, while every other error of a request
    that got a response (a cut connection, an idle timeout, an error event) keeps the
    server's id: the one call the operator may want to trace with the provider has none.
    """
    llm_server.enqueue(
        Fault.stall(
            30, after_bytes=len(ANTHROPIC_BODY), body=Replay(ANTHROPIC_BODY + ANTHROPIC_END)
        )
    )
    client = AnthropicClient(llm_server.url, KEY, model="claude-x")
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    seen: list[Any] = []
    client.stream(USER).subscribe(seen.append, done.set_result)
    await _wait_for_text(seen)
    await client.aclose()
    error = await asyncio.wait_for(done, 5)
    assert isinstance(error, TransportError), error
    assert "client closed" in str(error)
    assert error.request_id is not None
    assert error.request_id.startswith("req_")


def test_a_call_cut_by_its_event_loop_ending_keeps_its_request_id() -> None:
    """The same for the "cancelled (its event loop ended?)" error of a call whose
    ``asyncio.run`` returned while it streamed."""
    errors: list[BaseException] = []
    with LLMServer.in_thread() as server:
        server.enqueue(
            Fault.stall(
                30, after_bytes=len(ANTHROPIC_BODY), body=Replay(ANTHROPIC_BODY + ANTHROPIC_END)
            )
        )

        async def main() -> None:
            client = AnthropicClient(server.url, KEY, model="claude-x")
            seen: list[Any] = []
            client.stream(USER).subscribe(seen.append, errors.append)
            await _wait_for_text(seen)

        asyncio.run(main())
    assert len(errors) == 1, errors
    (error,) = errors
    assert isinstance(error, TransportError), error
    assert "event loop ended" in str(error)
    assert isinstance(error, RafrxError)
    assert error.request_id is not None
    assert error.request_id.startswith("req_")


# ---------------------------------------------------------------- 6. netrc logins


def test_a_netrc_login_without_a_password_is_no_secret(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the user has: a ``.netrc`` entry for the proxy host with a login and no
    password (``machine proxy.example login api``).

    What happened: ``proxy_secrets`` gave ``"api"`` (and its Basic form) as a secret, so
    every "api" in an error's message and body became ``***`` ("https://***.example.com",
    "invalid_***_key"...): a login is no secret, and without a password there is none.

    What should happen: no secret from that entry; with a password, the password and the
    Basic credentials made of both, as before (never the login alone).
    """
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine proxy.example login api\n")
    netrc_file.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc_file))
    assert proxy_secrets({"https": "http://proxy.example:3128"}) == ()
    netrc_file.write_text("machine proxy.example login api password pr0xy-pw\n")
    secrets = proxy_secrets({"https": "http://proxy.example:3128"})
    assert "pr0xy-pw" in secrets
    assert "api" not in secrets


@pytest.mark.asyncio
async def test_a_netrc_login_does_not_mangle_an_error(
    llm_server: LLMServer, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: a proxy host whose netrc entry has the login ``invalid`` and no
    password; the provider's 401 says "invalid_api_key": it must read so."""
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine proxy.example login invalid\n")
    netrc_file.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc_file))
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    body = {
        "error": {
            "message": "Incorrect API key",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    llm_server.enqueue(Fault.status(401, body=body))
    async with OpenAIChatClient(llm_server.url, api_key=KEY, model="m", trust_env=True) as c:
        err = await _error(c)
    assert isinstance(err, HTTPStatusError)
    assert err.code == "invalid_api_key"
    assert err.body is not None
    assert "invalid_api_key" in err.body
