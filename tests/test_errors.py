"""The ``RafrxError`` hierarchy: attributes, retryability, clipping, pickling, reprs."""

from __future__ import annotations

import pickle

import pytest

from rafrx import errors as e
from rafrx.response import AgentResponse

SECRET = "sk-live-0123456789abcdefSECRET"

HIERARCHY = [
    (e.TransportError, e.RafrxError),
    (e.StreamInterrupted, e.TransportError),
    (e.StreamTimeout, e.TransportError),
    (e.ConnectTimeout, e.StreamTimeout),
    (e.IdleTimeout, e.StreamTimeout),
    (e.HTTPStatusError, e.RafrxError),
    (e.ProtocolError, e.RafrxError),
    (e.ContentTypeError, e.ProtocolError),
    (e.LimitExceeded, e.ProtocolError),
    (e.MalformedEvent, e.ProtocolError),
    (e.IncompleteStream, e.ProtocolError),
    (e.ProviderError, e.RafrxError),
    (e.ToolError, e.RafrxError),
    (e.ToolNotFound, e.ToolError),
    (e.InvalidToolArguments, e.ToolError),
    (e.ToolTimeout, e.ToolError),
    (e.ToolApprovalDenied, e.ToolError),
    (e.ToolExecutionError, e.ToolError),
    (e.MaxStepsExceeded, e.RafrxError),
    (e.TurnTimeout, e.StreamTimeout),
    (e.TurnTimeout, TimeoutError),
    (e.RafrxError, Exception),
]


@pytest.mark.parametrize(("cls", "base"), HIERARCHY, ids=lambda c: c.__name__)
def test_hierarchy(cls: type[Exception], base: type[Exception]) -> None:
    assert issubclass(cls, base)


def test_every_exported_error_is_a_rafrx_error() -> None:
    exported = [getattr(e, name) for name in e.__all__ if name != "MAX_BODY_CHARS"]
    assert len(exported) == 21
    assert all(issubclass(cls, e.RafrxError) for cls in exported)


def test_base_error_attributes() -> None:
    err = e.RafrxError("it broke", status=502, body="bad gateway", retryable=True)
    assert (err.message, err.status, err.body, err.retryable) == (
        "it broke",
        502,
        "bad gateway",
        True,
    )
    assert err.partial is None
    assert str(err) == "it broke"
    assert err.args == ("it broke",)
    bare = e.RafrxError("x")
    assert (bare.status, bare.body, bare.retryable) == (None, None, False)


@pytest.mark.parametrize(
    ("err", "retryable"),
    [
        (e.TransportError("refused"), True),
        (e.StreamInterrupted("reset mid-stream"), False),
        (e.ConnectTimeout("slow connect"), True),
        (e.IdleTimeout("silence"), False),
        (e.IncompleteStream("no [DONE]"), False),
        (e.ProviderError("overloaded"), False),
        (e.ProviderError("overloaded", retryable=True), True),
        (e.StreamInterrupted("x", retryable=True), True),
    ],
    ids=repr,
)
def test_retryable_defaults_and_overrides(err: e.RafrxError, retryable: bool) -> None:
    assert err.retryable is retryable


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (504, True),
        (529, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (422, False),
    ],
)
def test_http_status_retryable(status: int, retryable: bool) -> None:
    assert e.HTTPStatusError(status).retryable is retryable


def test_http_status_error_attributes_and_message() -> None:
    err = e.HTTPStatusError(
        429,
        body='{"error": {"type": "rate_limit_error"}}',
        provider_message="slow down",
        error_type="rate_limit_error",
        retry_after=2.5,
    )
    assert err.status == 429
    assert err.body == '{"error": {"type": "rate_limit_error"}}'
    assert (err.provider_message, err.error_type, err.retry_after) == (
        "slow down",
        "rate_limit_error",
        2.5,
    )
    assert str(err) == "HTTP 429: slow down"
    assert str(e.HTTPStatusError(500)) == "HTTP 500"
    assert str(e.HTTPStatusError(500, message="custom")) == "custom"


def test_body_is_clipped_to_max_body_chars() -> None:
    exact = "x" * e.MAX_BODY_CHARS
    assert e.RafrxError("m", body=exact).body == exact
    long = "y" * (e.MAX_BODY_CHARS + 10)
    clipped = e.HTTPStatusError(500, body=long).body
    assert clipped is not None
    assert clipped.startswith("y" * e.MAX_BODY_CHARS)
    assert "10 more characters" in clipped
    assert len(clipped) < len(long) + 40
    raw = e.MalformedEvent("bad json", raw="z" * (e.MAX_BODY_CHARS + 1), event_name="delta")
    assert raw.raw.startswith("z" * e.MAX_BODY_CHARS)
    assert "1 more characters" in raw.raw
    assert raw.event_name == "delta"


def test_subclass_specific_attributes() -> None:
    limit = e.LimitExceeded("too long", limit=1024)
    assert limit.limit == 1024
    provider = e.ProviderError("overloaded", error_type="overloaded_error", code="529", body="{}")
    assert (provider.error_type, provider.code, provider.body) == ("overloaded_error", "529", "{}")
    tool = e.ToolNotFound("no such tool", call_id="call_1", name="nope")
    assert (tool.call_id, tool.name) == ("call_1", "nope")


ALL_ERRORS: list[e.RafrxError] = [
    e.RafrxError("base", status=500, body=f"key {SECRET}", retryable=True),
    e.TransportError("refused"),
    e.StreamInterrupted("reset"),
    e.ConnectTimeout("connect"),
    e.IdleTimeout("idle"),
    e.HTTPStatusError(
        401,
        body=f'{{"error": "bad key {SECRET}"}}',
        provider_message="bad key",
        error_type="authentication_error",
        retry_after=1.0,
    ),
    e.ContentTypeError("text/html", body=f"<html>{SECRET}</html>"),
    e.LimitExceeded("big", limit=10),
    e.MalformedEvent("bad", raw=f"{{unparsable {SECRET}", event_name="message"),
    e.IncompleteStream("no terminal marker"),
    e.ProviderError("overloaded", error_type="overloaded_error", code="x", retryable=True),
    e.ToolNotFound("nope", call_id="c", name="n"),
    e.InvalidToolArguments("bad args", call_id="c", name="n"),
    e.ToolTimeout("slow", call_id="c"),
    e.ToolApprovalDenied("denied", name="rm"),
    e.ToolExecutionError("ValueError: x", call_id="c"),
    e.MaxStepsExceeded("10 steps"),
]


@pytest.mark.parametrize("err", ALL_ERRORS, ids=lambda x: type(x).__name__)
def test_pickling_keeps_class_and_every_attribute(err: e.RafrxError) -> None:
    err.partial = AgentResponse(text="so far", interrupted=True)
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is type(err)
    assert vars(clone) == vars(err)
    assert str(clone) == str(err)
    assert clone.retryable is err.retryable
    assert clone.partial == AgentResponse(text="so far", interrupted=True)


@pytest.mark.parametrize("err", ALL_ERRORS, ids=lambda x: type(x).__name__)
def test_repr_is_readable_and_never_leaks_the_body(err: e.RafrxError) -> None:
    text = repr(err)
    assert text.startswith(f"{type(err).__name__}({err.message!r}")
    assert SECRET not in text
    assert SECRET not in str(err)


def test_repr_shows_the_status() -> None:
    assert repr(e.HTTPStatusError(503)) == "HTTPStatusError('HTTP 503', status=503)"


def test_errors_can_be_raised_and_caught_by_base() -> None:
    with pytest.raises(e.RafrxError) as info:
        raise e.IdleTimeout("no bytes for 30 s")
    assert isinstance(info.value, e.StreamTimeout)
