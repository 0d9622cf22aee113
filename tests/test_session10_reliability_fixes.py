"""Regression tests of session 10's reliability gaps (RELIABILITY.md row 14, the tool
schema check).

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import json

import pytest
from reactivex import operators as rx_ops

import rafrx
from rafrx import operators as ops
from rafrx.sources import from_sse


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


# ---------------------------------------------------------------- RELIABILITY row 14


def _call_delta(index: int, call_id: str, arguments: str) -> dict[str, object]:
    return {
        "tool_calls": [
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": "add", "arguments": arguments},
            }
        ]
    }


_TWO_CALLS_ONE_BROKEN = (
    _chunk({"content": "Adding."})
    + _chunk(_call_delta(0, "call_ok", '{"a": 1, "b": 2}'))
    + _chunk(_call_delta(1, "call_bad", '{"a": 1, "b": '))
    + _chunk({}, "tool_calls")
    + b"data: [DONE]\n\n"
)


@rafrx.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.mark.asyncio
async def test_invalid_arguments_at_a_normal_finish_are_a_typed_error_of_that_call() -> None:
    """RELIABILITY row 14: "an error scoped to that tool call (InvalidToolArguments(call_id,
    raw))". The call only had a string ``error``: no InvalidToolArguments carried its
    call_id or raw arguments (execute_tools raised one with neither)."""
    results = await from_sse(_TWO_CALLS_ONE_BROKEN).pipe(
        ops.convert(), ops.execute_tools([add]), rx_ops.to_list()
    )
    contents = [c for r in results for c in r.contents]
    callings = {c.call_id: c for c in contents if isinstance(c, rafrx.ToolCallingContent)}
    assert callings["call_ok"].invalid_arguments is None
    error = callings["call_bad"].invalid_arguments
    assert isinstance(error, rafrx.InvalidToolArguments)
    assert isinstance(error, rafrx.RafrxError)
    assert (error.call_id, error.name, error.raw) == ("call_bad", "add", '{"a": 1, "b": ')
    assert '{"a": 1, "b": ' not in repr(error)  # (the raw arguments stay an attribute)
    called = {c.call_id: c for c in contents if isinstance(c, rafrx.ToolCalledContent)}
    assert called["call_ok"].result == "3"  # the other call and the text stand
    assert called["call_bad"].error == str(error)
    response = from_sse(_TWO_CALLS_ONE_BROKEN).pipe(ops.convert(), ops.aggregate()).run()
    assert response.text == "Adding."
    bad = next(call for call in response.tool_calls if call.id == "call_bad")
    assert bad.invalid_arguments is not None
    assert (bad.invalid_arguments.call_id, bad.invalid_arguments.raw) == (
        "call_bad",
        '{"a": 1, "b": ',
    )
    ok = next(call for call in response.tool_calls if call.id == "call_ok")
    assert ok.invalid_arguments is None
    assert ok.arguments == {"a": 1, "b": 2}


def test_a_call_cut_short_is_no_invalid_arguments_error() -> None:
    """A call the token limit cut short says so in ``error``; it is not an
    InvalidToolArguments (the stop reason, not a JSON error, is the cause)."""
    body = (
        _chunk(_call_delta(0, "call_cut", '{"a": 1, "b": '))
        + _chunk({}, "length")
        + b"data: [DONE]\n\n"
    )
    response = from_sse(body).pipe(ops.convert(), ops.aggregate()).run()
    (call,) = response.tool_calls
    assert call.complete is False
    assert call.error is not None
    assert call.invalid_arguments is None


# ---------------------------------------------------------------- empty anyOf / oneOf


@pytest.mark.parametrize("keyword", ["anyOf", "oneOf"])
def test_an_empty_any_of_or_one_of_matches_no_value(keyword: str) -> None:
    """JSON Schema: anyOf/oneOf must be non-empty, and no value satisfies an empty one.
    The check let every value through an empty list of branches, so a call ran with
    arguments its (broken) schema cannot accept."""

    def pick(choice: object) -> object:
        return choice

    schema = {
        "type": "object",
        "properties": {"choice": {keyword: []}},
        "required": ["choice"],
    }
    picker = rafrx.Tool("pick", "Pick.", schema, pick)
    with pytest.raises(rafrx.InvalidToolArguments, match=f"empty {keyword}"):
        picker.validate({"choice": 1})
    whole = rafrx.Tool("whole", "Whole.", {"type": "object", keyword: []}, pick)
    with pytest.raises(rafrx.InvalidToolArguments, match=f"empty {keyword}"):
        whole.validate({})
