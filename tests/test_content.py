"""``ResponseMetadata`` and the 12 ``Content`` variants."""

from __future__ import annotations

import typing
from typing import Any

import attrs
import pytest

from rafrx.content import (
    Content,
    ErrorContent,
    ReasoningContent,
    ResponseMetadata,
    TextContent,
    ToolCallArgsContent,
    ToolCallArgsParsedContent,
    ToolCallArgsProgressContent,
    ToolCalledContent,
    ToolCallEndContent,
    ToolCallIncompleteContent,
    ToolCallingContent,
    ToolCallStartContent,
    UriContent,
    UsageContent,
)
from rafrx.response import Usage

META = ResponseMetadata("resp_1", "gpt-x")
USAGE = Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)

ALL_CONTENTS: list[Any] = [
    TextContent("Hello"),
    ReasoningContent("thinking"),
    UriContent("https://example.com", "text/html"),
    ToolCallStartContent("call_1", "read_file"),
    ToolCallArgsContent("call_1", '{"path"'),
    ToolCallArgsParsedContent("call_1", "path", "a.py"),
    ToolCallArgsProgressContent("call_1", "content", 5, "héé"),
    ToolCallEndContent("call_1"),
    ToolCallingContent("call_1", "read_file", {"path": "a.py"}, '{"path": "a.py"}'),
    ToolCallIncompleteContent("call_1", "read_file", '{"path": "a.', {"path": "a."}),
    ToolCalledContent("call_1", "file contents"),
    UsageContent(USAGE),
    ErrorContent("connection reset"),
]

EXPECTED_MATCH_ARGS = {
    TextContent: ("text",),
    ReasoningContent: ("text",),
    UriContent: ("uri", "media_type"),
    ToolCallStartContent: ("call_id", "name"),
    ToolCallArgsContent: ("call_id", "args_delta"),
    ToolCallArgsParsedContent: ("call_id", "name", "value"),
    ToolCallArgsProgressContent: ("call_id", "name", "received", "value"),
    ToolCallEndContent: ("call_id",),
    ToolCallingContent: ("call_id", "name", "arguments", "raw_arguments", "error"),
    ToolCallIncompleteContent: (
        "call_id",
        "name",
        "raw_arguments",
        "partial_value",
        "finish_reason",
        "error",
    ),
    ToolCalledContent: ("call_id", "result", "error"),
    UsageContent: ("usage",),
    ErrorContent: ("message",),
}


def test_there_are_thirteen_variants_and_the_union_holds_exactly_them() -> None:
    assert len(ALL_CONTENTS) == 13
    assert set(typing.get_args(Content)) == {type(c) for c in ALL_CONTENTS}


def test_response_metadata_defaults_and_value_semantics() -> None:
    assert ResponseMetadata() == ResponseMetadata(None, None)
    assert (META.id, META.model) == ("resp_1", "gpt-x")
    assert ResponseMetadata("a") != ResponseMetadata("b")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        META.id = "other"  # type: ignore[misc]


@pytest.mark.parametrize("content", ALL_CONTENTS, ids=lambda c: type(c).__name__)
def test_meta_is_keyword_only_defaults_to_empty_and_is_not_matched(content: Any) -> None:
    cls = type(content)
    assert content.meta == ResponseMetadata()
    assert cls.__match_args__ == EXPECTED_MATCH_ARGS[cls]
    assert "meta" not in cls.__match_args__
    with_meta = attrs.evolve(content, meta=META)
    assert with_meta.meta is META
    positional = [getattr(content, name) for name in cls.__match_args__]
    with pytest.raises(TypeError):
        cls(*positional, META)


@pytest.mark.parametrize("content", ALL_CONTENTS, ids=lambda c: type(c).__name__)
def test_every_content_is_frozen_and_slotted(content: Any) -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(content, type(content).__match_args__[0], "changed")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        content.meta = META
    assert not hasattr(content, "__dict__")


@pytest.mark.parametrize("content", ALL_CONTENTS, ids=lambda c: type(c).__name__)
def test_every_content_is_equal_by_value_including_meta(content: Any) -> None:
    assert attrs.evolve(content) == content
    assert attrs.evolve(content, meta=META) != content
    assert attrs.evolve(content, meta=META) == attrs.evolve(content, meta=META)
    first = type(content).__match_args__[0]
    changed = USAGE + USAGE if first == "usage" else "zz"
    assert attrs.evolve(content, **{first: changed}) != content


@pytest.mark.parametrize("content", ALL_CONTENTS, ids=lambda c: type(c).__name__)
def test_reprs_are_readable_and_leave_meta_out(content: Any) -> None:
    text = repr(attrs.evolve(content, meta=META))
    assert text.startswith(type(content).__name__ + "(")
    assert "meta" not in text
    assert "resp_1" not in text


def test_repr_examples() -> None:
    assert repr(TextContent("Hi", meta=META)) == "TextContent(text='Hi')"
    assert repr(ToolCallEndContent("c")) == "ToolCallEndContent(call_id='c')"


def describe(content: Content) -> str:
    """Match every variant positionally, as the contract promises users can."""
    match content:
        case TextContent(text):
            return f"text {text}"
        case ReasoningContent(text):
            return f"reasoning {text}"
        case UriContent(uri, media_type):
            return f"uri {uri} {media_type}"
        case ToolCallStartContent(call_id, name):
            return f"start {call_id} {name}"
        case ToolCallArgsContent(call_id, delta):
            return f"args {call_id} {delta}"
        case ToolCallArgsParsedContent(call_id, name, value):
            return f"parsed {call_id} {name}={value}"
        case ToolCallArgsProgressContent(call_id, name, received, value):
            return f"progress {call_id} {name} {received} {value}"
        case ToolCallEndContent(call_id):
            return f"end {call_id}"
        case ToolCallingContent(call_id, name, arguments, raw, error):
            return f"calling {call_id} {name} {arguments} {raw} {error}"
        case ToolCallIncompleteContent(call_id, name, raw, value, reason, error):
            return f"cut {call_id} {name} {raw} {value} {reason} {error}"
        case ToolCalledContent(call_id, result, error):
            return f"called {call_id} {result} {error}"
        case UsageContent(usage):
            return f"usage {usage.total_tokens}"
        case ErrorContent(message):
            return f"error {message}"
        case _:
            typing.assert_never(content)


def test_pattern_matching_on_every_variant() -> None:
    assert [describe(attrs.evolve(c, meta=META)) for c in ALL_CONTENTS] == [
        "text Hello",
        "reasoning thinking",
        "uri https://example.com text/html",
        "start call_1 read_file",
        'args call_1 {"path"',
        "parsed call_1 path=a.py",
        "progress call_1 content 5 héé",
        "end call_1",
        "calling call_1 read_file {'path': 'a.py'} {\"path\": \"a.py\"} None",
        "cut call_1 read_file {\"path\": \"a. {'path': 'a.'} None "
        "arguments cut short: the stream ended before the call did",
        "called call_1 file contents None",
        "usage 3",
        "error connection reset",
    ]


def test_match_with_keyword_meta_pattern() -> None:
    match TextContent("x", meta=META):
        case TextContent(text, meta=ResponseMetadata(id=response_id)):
            assert (text, response_id) == ("x", "resp_1")
        case _:
            pytest.fail("keyword pattern on meta did not match")


def test_defaults() -> None:
    assert UriContent("u").media_type is None
    calling = ToolCallingContent("c", "f", {})
    assert (calling.raw_arguments, calling.error) == ("", None)
    called = ToolCalledContent("c")
    assert (called.result, called.error) == (None, None)
    assert ReasoningContent("r").provider_data is None
    assert ReasoningContent("r", provider_data={"sig": "s"}).provider_data == {"sig": "s"}


def test_tool_called_content_result_and_error_are_mutually_exclusive() -> None:
    assert ToolCalledContent("c", "ok").result == "ok"
    assert ToolCalledContent("c", error="boom").error == "boom"
    with pytest.raises(ValueError, match="not both"):
        ToolCalledContent("c", "ok", "boom")
    with pytest.raises(ValueError, match="not both"):
        attrs.evolve(ToolCalledContent("c", "ok"), error="boom")


def test_reasoning_provider_data_stays_out_of_repr_and_match_args() -> None:
    content = ReasoningContent("r", provider_data={"signature": "SECRETSIG"})
    assert "SECRETSIG" not in repr(content)
    assert ReasoningContent.__match_args__ == ("text",)


def test_unicode_values_round_trip_untouched() -> None:
    text = "𝄞 😀 中文 \u2028 \x00"
    assert TextContent(text).text == text
    assert ToolCallArgsProgressContent("c", "k", len(text.encode()), text).value == text
