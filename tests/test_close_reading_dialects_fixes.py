"""Regression tests for the bugs a close, line-by-line reading of the OpenAI Responses
dialect found (items only in the final output, items without an id, ``.done`` events
after their item's end).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import json
from typing import Any

from reactivex import operators as rx

from rafrx import operators as ops
from rafrx.sources import from_sse
from rafrx.updates import ReasoningDelta, TextDelta

R = "openai-responses"


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def updates(body: bytes) -> list[Any]:
    return from_sse(body, dialect=R).pipe(rx.to_list()).run()


def aggregate(body: bytes) -> Any:
    return from_sse(body, dialect=R).pipe(ops.convert(), ops.aggregate()).run()


CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "m"}}
MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
}


def test_reasoning_item_without_an_id_loses_its_text() -> None:
    """What the user does: streams from a Responses-compatible server that sends a
    reasoning item's summary only in ``output_item.done`` (no deltas, no
    ``reasoning_summary_text.done``) and gives the item no ``id``.

    What happens: the summary text is dropped (``response.reasoning_text`` is None):
    ``_item_done`` only looks at a reasoning item when ``item_id is not None``
    (openai_responses.py, ``if kind == "reasoning" and item_id is not None``), so
    ``_reasoning_of`` never runs.

    What should happen: the text is delivered. The module docstring says reasoning
    from a server that sends no delta comes from "the text of their ``.done`` events,
    else of the finished item"; the id only matters for sending the item back (which
    needs one), not for showing its text. openai-python's ``ResponseStreamState`` keeps
    the item's summary whatever its id.
    """
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan."}]}
    body = sse(
        CREATED,
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**reasoning, "summary": []},
        },
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {"type": "response.output_item.done", "output_index": 1, "item": MESSAGE},
        {"type": "response.completed", "response": {"output": [reasoning, MESSAGE]}},
    )
    response = aggregate(body)
    assert response.text == "Hello."
    assert response.reasoning_text == "Plan."


def test_reasoning_only_in_response_completed_is_dropped() -> None:
    """What the user does: streams from a gateway that "fake-streams" (sends
    ``response.created`` then one ``response.completed`` holding the whole output:
    a reasoning item with its summary and ``encrypted_content``, then a function call).

    What happens: the call is delivered (``_end`` reads calls and messages of the final
    output), but the reasoning item is dropped entirely: no reasoning text and no
    ``ReasoningDelta(provider_data=item)``, so the encrypted reasoning cannot go back in
    the next request of a tool loop. ``_end`` (openai_responses.py) lists
    ``finished = (*_CALLS, "message")`` and never passes reasoning items on.

    What should happen: the final output's reasoning item is delivered like one that
    came in ``output_item.done`` (its text, and the item kept whole). openai-python's
    ``ResponseStreamState`` takes the final ``response`` of ``response.completed`` as
    the result, reasoning included; ``_end``'s own comment says an item "no
    output_item event brought ... is delivered from there".
    """
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Need the weather."}],
        "encrypted_content": "gAAA-secret",
    }
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "weather",
        "arguments": "{}",
        "status": "completed",
    }
    body = sse(CREATED, {"type": "response.completed", "response": {"output": [reasoning, call]}})
    got = updates(body)
    kept = [u for u in got if isinstance(u, ReasoningDelta) and u.provider_data]
    assert any(u.provider_data.get("encrypted_content") == "gAAA-secret" for u in kept), got
    assert "".join(u.delta for u in got if isinstance(u, ReasoningDelta)) == "Need the weather."


def test_output_text_done_after_its_item_done_repeats_the_text() -> None:
    """What the user does: reads a server (no deltas) whose ``response.output_text.done``
    for a message arrives after that message's ``output_item.done``.

    What happens: the text is delivered twice ("Hello.Hello."): ``_item_done`` sends the
    item's text and notes it, but ``_text_done`` only checks the global
    ``_streamed_text`` flag, never ``_was_texted(item_id, output_index)``.

    What should happen: "Hello." once. The module docstring: "a message's text is taken
    once, whatever ids its stages give it"; the SDK's accumulator never appends the
    text of a ``.done`` event.
    """
    body = sse(
        CREATED,
        {"type": "response.output_item.done", "output_index": 0, "item": MESSAGE},
        {
            "type": "response.output_text.done",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "text": "Hello.",
        },
        {"type": "response.completed", "response": {}},
    )
    texts = [u.delta for u in updates(body) if isinstance(u, TextDelta)]
    assert "".join(texts) == "Hello."


def test_reasoning_summary_done_after_its_item_done_repeats_the_reasoning() -> None:
    """What the user does: reads a server (no deltas) whose
    ``reasoning_summary_text.done`` arrives after the reasoning item's ``output_item.done``.

    What happens: the reasoning is delivered twice: ``_reasoning_of`` (for the finished
    item) sends the text but records nothing in ``_reasoning_finals`` /
    ``_reasoned_at``, so ``_reasoning_done`` sends it again.

    What should happen: once, as for a message's text (see the previous test), and as
    ``_reasoning_done`` already ensures when the events come in the usual order.
    """
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Plan."}],
    }
    body = sse(
        CREATED,
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {
            "type": "response.reasoning_summary_text.done",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "text": "Plan.",
        },
        {"type": "response.completed", "response": {}},
    )
    assert aggregate(body).reasoning_text == "Plan."
