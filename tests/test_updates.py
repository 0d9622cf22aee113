"""The 13 ``rafrx.updates`` variants: constructors, immutability, matching, equality."""

from __future__ import annotations

import typing
from typing import Any

import attrs
import pytest

import rafrx
from rafrx import updates as u
from rafrx.response import FinishReason, Usage

USAGE = Usage(prompt_tokens=3, completion_tokens=4, total_tokens=7)

# One instance of each variant, built with positional arguments.
ALL_UPDATES: list[Any] = [
    u.TextDelta("Hel"),
    u.ReasoningDelta("hmm"),
    u.ToolCallDelta(0, "call_1", "read_file", '{"pa'),
    u.ToolCallStart("call_1", "read_file"),
    u.ToolCallArgs("call_1", '{"path": '),
    u.ToolCallEnd("call_1"),
    u.ToolCalled("call_1", "42"),
    u.ToolApprovalRequest("call_1", "rm", {"path": "/"}, "delete a file"),
    u.Usage(USAGE),
    u.Finish(FinishReason.STOP, USAGE),
    u.Error("overloaded"),
    u.ResponseMetadata("resp_1", "gpt-x"),
    u.Uri("https://example.com/doc", "text/html"),
]


def test_there_are_thirteen_variants_and_the_union_holds_exactly_them() -> None:
    assert len({type(x) for x in ALL_UPDATES}) == 13
    assert set(typing.get_args(u.AgentResponseUpdate)) == {type(x) for x in ALL_UPDATES}
    assert rafrx.AgentResponseUpdate is u.AgentResponseUpdate


def test_constructors_and_defaults() -> None:
    assert u.TextDelta("x").delta == "x"
    assert u.ReasoningDelta("r").provider_data is None
    assert u.ReasoningDelta("r", provider_data={"signature": "s"}).provider_data == {
        "signature": "s"
    }
    delta = u.ToolCallDelta(2)
    assert (delta.index, delta.id, delta.name, delta.arguments_delta) == (2, None, None, "")
    assert u.ToolCalled("c").result is None
    assert u.ToolCalled("c").error is None
    assert u.ToolCalled("c", error="boom").error == "boom"
    assert u.ToolApprovalRequest("c", "n", {}).description == ""
    assert u.Finish(FinishReason.LENGTH).usage is None
    assert u.Error("m").error_type is None
    assert u.Error("m", error_type="overloaded_error").error_type == "overloaded_error"
    assert u.ResponseMetadata() == u.ResponseMetadata(None, None)
    assert u.Uri("u").media_type is None


def test_constructors_accept_keywords() -> None:
    assert u.ToolCallDelta(index=1, id="a", name="f", arguments_delta="{}") == u.ToolCallDelta(
        1, "a", "f", "{}"
    )
    assert u.ToolCallStart(id="a", name="f") == u.ToolCallStart("a", "f")
    assert u.ToolCallArgs(id="a", args_delta="{") == u.ToolCallArgs("a", "{")
    assert u.Finish(finish_reason=FinishReason.STOP, usage=USAGE) == u.Finish(
        FinishReason.STOP, USAGE
    )


@pytest.mark.parametrize("update", ALL_UPDATES, ids=lambda x: type(x).__name__)
def test_every_update_is_frozen_and_slotted(update: Any) -> None:
    field = attrs.fields(type(update))[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(update, field, "changed")
    assert not hasattr(update, "__dict__")


@pytest.mark.parametrize("update", ALL_UPDATES, ids=lambda x: type(x).__name__)
def test_every_update_is_equal_by_value_and_hashable(update: Any) -> None:
    twin = attrs.evolve(update)
    assert twin == update
    assert twin is not update
    if type(update) is not u.ToolApprovalRequest:  # its arguments may be a dict
        assert hash(twin) == hash(update)
    field = attrs.fields(type(update))[0]
    other = attrs.evolve(update, **{field.name: 99 if field.name == "index" else "other"})
    assert other != update


@pytest.mark.parametrize("update", ALL_UPDATES, ids=lambda x: type(x).__name__)
def test_every_update_has_a_readable_repr(update: Any) -> None:
    text = repr(update)
    assert text.startswith(type(update).__name__ + "(")
    first = attrs.fields(type(update))[0]
    assert f"{first.name}=" in text


def describe(update: u.AgentResponseUpdate) -> str:
    """Match every variant positionally, the way users write it."""
    match update:
        case u.TextDelta(delta):
            return f"text {delta}"
        case u.ReasoningDelta(delta):
            return f"reasoning {delta}"
        case u.ToolCallDelta(index, call_id, name, args):
            return f"delta {index} {call_id} {name} {args}"
        case u.ToolCallStart(call_id, name):
            return f"start {call_id} {name}"
        case u.ToolCallArgs(call_id, args):
            return f"args {call_id} {args}"
        case u.ToolCallEnd(call_id):
            return f"end {call_id}"
        case u.ToolCalled(call_id, result, error):
            return f"called {call_id} {result} {error}"
        case u.ToolApprovalRequest(call_id, name, arguments, description):
            return f"approve {call_id} {name} {arguments} {description}"
        case u.Usage(usage):
            return f"usage {usage.total_tokens}"
        case u.Finish(reason, usage):
            return f"finish {reason} {usage is not None}"
        case u.Error(message):
            return f"error {message}"
        case u.ResponseMetadata(response_id, model):
            return f"meta {response_id} {model}"
        case u.Uri(uri, media_type):
            return f"uri {uri} {media_type}"
        case _:
            typing.assert_never(update)


def test_pattern_matching_on_every_variant() -> None:
    assert [describe(x) for x in ALL_UPDATES] == [
        "text Hel",
        "reasoning hmm",
        'delta 0 call_1 read_file {"pa',
        "start call_1 read_file",
        'args call_1 {"path": ',
        "end call_1",
        "called call_1 42 None",
        "approve call_1 rm {'path': '/'} delete a file",
        "usage 7",
        "finish stop True",
        "error overloaded",
        "meta resp_1 gpt-x",
        "uri https://example.com/doc text/html",
    ]


def test_keyword_only_extras_stay_out_of_match_args() -> None:
    assert u.ReasoningDelta.__match_args__ == ("delta",)
    assert u.Error.__match_args__ == ("message",)


def test_update_usage_and_metadata_are_distinct_from_the_value_classes() -> None:
    assert u.Usage is not rafrx.Usage
    assert u.ResponseMetadata is not rafrx.ResponseMetadata
    assert u.Usage(USAGE).usage is USAGE
    assert u.ResponseMetadata("r", "m") != rafrx.ResponseMetadata("r", "m")


def test_unicode_survives_untouched() -> None:
    text = 'naïve 中文 😀 𝄞 \u2028 "\\'
    assert u.TextDelta(text).delta == text
    assert u.ToolCallArgs("c", text).args_delta == text
