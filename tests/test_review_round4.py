"""Review of round 4 (commit 4d89f71), read as a reviewer of that commit: the Responses
dialect's reasoning items taken from ``response.completed``'s final output, reasoning
items without an id, ``.done`` events after their item's end; ``from_openai`` reading
``reasoning``; ``from_anthropic`` joining a user's text blocks with blank lines.

Each pin asks of one change: does anything now come twice, or no longer come?
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reactivex import operators as rx

from rafrx import operators as ops
from rafrx.messages import ChatMessage, from_anthropic, to_anthropic
from rafrx.sources import from_sse
from rafrx.updates import ReasoningDelta, TextDelta

R = "openai-responses"
FIXTURES = Path(__file__).resolve().parents[0] / "data" / "fixtures"


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def updates(body: bytes) -> list[Any]:
    return from_sse(body, dialect=R).pipe(rx.to_list()).run()


def aggregate(body: bytes) -> Any:
    return from_sse(body, dialect=R).pipe(ops.convert(), ops.aggregate()).run()


def kept_items(got: list[Any]) -> list[dict[str, Any]]:
    return [u.provider_data for u in got if isinstance(u, ReasoningDelta) and u.provider_data]


def reasoning_text(got: list[Any]) -> str:
    return "".join(u.delta for u in got if isinstance(u, ReasoningDelta))


def text(got: list[Any]) -> str:
    return "".join(u.delta for u in got if isinstance(u, TextDelta))


CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "m"}}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "Plan."}],
    "encrypted_content": "gAAA",
}
MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "weather",
    "arguments": "{}",
    "status": "completed",
}


def done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def completed(*output: dict[str, Any], kind: str = "response.completed") -> dict[str, Any]:
    return {"type": kind, "response": {"output": list(output)}}


# --------------------------------------------------- the recorded provider streams


def _responses_fixtures() -> list[dict[str, Any]]:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    return [
        e
        for e in manifest
        if e["format"] == "openai-responses" and "error_event" not in e.get("tags", [])
    ]


@pytest.mark.parametrize("entry", _responses_fixtures(), ids=lambda e: e["path"])
def test_recorded_streams_deliver_each_reasoning_item_once_with_the_oracles_text(
    entry: dict[str, Any],
) -> None:
    """The final output repeats every reasoning item the stream brought (OpenRouter's
    under a new id): none of them is kept twice, and the texts are the SDK's."""
    got = updates((FIXTURES / entry["path"]).read_bytes())
    reasonings = [i for i in kept_items(got) if i.get("type") == "reasoning"]
    final = _final_output(FIXTURES / entry["path"])
    assert len(reasonings) == sum(1 for i in final if i.get("type") == "reasoning")
    assert text(got) == entry["expected"]["text"]
    assert reasoning_text(got) == entry["expected"]["reasoning_text"]


def _final_output(path: Path) -> list[dict[str, Any]]:
    for line in path.read_text().splitlines():
        if line.startswith("data:") and '"response.completed"' in line:
            return list(json.loads(line[5:])["response"].get("output", []))
    return []


# ------------------------------------------- reasoning items in the final output


def test_a_reasoning_item_done_and_repeated_in_the_final_output_comes_once() -> None:
    got = updates(sse(CREATED, done(0, REASONING), done(1, MESSAGE), completed(REASONING, MESSAGE)))
    assert reasoning_text(got) == "Plan."
    assert [i["type"] for i in kept_items(got)] == ["reasoning", "rafrx.message_ref"]


def test_a_final_output_giving_the_reasoning_item_a_new_id_does_not_repeat_it() -> None:
    """LiteLLM / OpenRouter give the final output's items ids of their own: the output
    index says it is the same item."""
    renamed = {**REASONING, "id": "rs_final"}
    got = updates(sse(CREATED, done(0, REASONING), completed(renamed)))
    assert reasoning_text(got) == "Plan."
    assert [i["id"] for i in kept_items(got)] == ["rs_1"]


def test_reasoning_only_in_the_final_output_keeps_output_order_when_nothing_streamed() -> None:
    """A fake-streaming gateway: everything in ``response.completed``; the items go back
    in output order, the reasoning item first."""
    body = sse(CREATED, completed(REASONING, CALL))
    got = updates(body)
    assert reasoning_text(got) == "Plan."
    assert [i["type"] for i in kept_items(got)] == ["reasoning", "rafrx.function_call_ref"]


def test_two_reasoning_items_only_in_the_final_output_both_come_in_order() -> None:
    second = {**REASONING, "id": "rs_2", "summary": [{"type": "summary_text", "text": "More."}]}
    got = updates(sse(CREATED, completed(REASONING, MESSAGE, second)))
    assert reasoning_text(got) == "Plan.More."
    assert [i.get("id") for i in kept_items(got)] == ["rs_1", "msg_1", "rs_2"]


def test_reasoning_streamed_with_deltas_then_cut_by_incomplete_is_kept_not_repeated() -> None:
    """``response.incomplete`` (max_output_tokens during the reasoning): the text came in
    deltas, the item only in the final output; the item is kept, its text not resent."""
    delta = {
        "type": "response.reasoning_summary_text.delta",
        "item_id": "rs_1",
        "output_index": 0,
        "summary_index": 0,
        "delta": "Plan.",
    }
    cut = {
        "type": "response.incomplete",
        "response": {
            "output": [REASONING],
            "incomplete_details": {"reason": "max_output_tokens"},
        },
    }
    got = updates(sse(CREATED, delta, cut))
    assert reasoning_text(got) == "Plan."
    assert [i["id"] for i in kept_items(got)] == ["rs_1"]


def test_reasoning_streamed_under_one_id_and_final_under_another_is_not_repeated() -> None:
    delta = {
        "type": "response.reasoning_text.delta",
        "item_id": "rs_tmp_a",
        "output_index": 0,
        "delta": "Plan.",
    }
    got = updates(sse(CREATED, delta, completed({**REASONING, "id": "rs_tmp_b"})))
    assert reasoning_text(got) == "Plan."
    assert len(kept_items(got)) == 1


def test_an_incomplete_response_with_a_done_reasoning_item_keeps_it_once() -> None:
    cut = completed(REASONING, kind="response.incomplete")
    got = updates(sse(CREATED, done(0, REASONING), cut))
    assert reasoning_text(got) == "Plan."
    assert len(kept_items(got)) == 1


# ----------------------------------------------------- reasoning items without an id


def test_a_reasoning_item_without_an_id_gives_its_text_but_is_not_kept_to_go_back() -> None:
    """The API pairs reasoning items by id: one without cannot go back, but its text
    is the user's to read."""
    anonymous = {k: v for k, v in REASONING.items() if k != "id"}
    got = updates(sse(CREATED, done(0, anonymous), done(1, MESSAGE), completed(anonymous, MESSAGE)))
    assert reasoning_text(got) == "Plan."
    assert all(i.get("type") != "reasoning" for i in kept_items(got))


def test_two_reasoning_items_without_ids_each_give_their_text_once() -> None:
    one = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "A."}]}
    two = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "B."}]}
    got = updates(sse(CREATED, done(0, one), done(1, two), completed(one, two)))
    assert reasoning_text(got) == "A.B."


def test_reasoning_without_an_id_streamed_by_done_events_is_not_repeated_by_its_item() -> None:
    anonymous = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "A."}]}
    part = {
        "type": "response.reasoning_summary_text.done",
        "output_index": 0,
        "summary_index": 0,
        "text": "A.",
    }
    got = updates(sse(CREATED, part, done(0, anonymous), completed(anonymous)))
    assert reasoning_text(got) == "A."


# ------------------------------------------------- .done events, before and after


def _text_done(index: int, part: int, value: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "response.output_text.done",
        "item_id": item_id,
        "output_index": index,
        "content_index": part,
        "text": value,
    }


TWO_PARTS = {
    **MESSAGE,
    "content": [
        {"type": "output_text", "text": "One. ", "annotations": []},
        {"type": "output_text", "text": "Two.", "annotations": []},
    ],
}


def test_a_message_whose_parts_come_only_as_done_events_gives_each_once() -> None:
    body = sse(
        CREATED,
        _text_done(0, 0, "One. "),
        _text_done(0, 1, "Two."),
        done(0, TWO_PARTS),
        completed(TWO_PARTS),
    )
    assert text(updates(body)) == "One. Two."


def test_part_done_events_after_the_item_done_add_nothing() -> None:
    body = sse(
        CREATED,
        done(0, TWO_PARTS),
        _text_done(0, 0, "One. "),
        _text_done(0, 1, "Two."),
        completed(TWO_PARTS),
    )
    assert text(updates(body)) == "One. Two."


def test_a_done_event_under_another_id_after_the_item_done_adds_nothing() -> None:
    """mistral.rs gives each stage of an item an id of its own: the index says."""
    body = sse(CREATED, done(0, MESSAGE), _text_done(0, 0, "Hello.", "msg_other"), completed())
    assert text(updates(body)) == "Hello."


def test_a_second_messages_text_done_is_not_taken_for_the_first_ones() -> None:
    second = {**MESSAGE, "id": "msg_2", "content": [{"type": "output_text", "text": "Bye."}]}
    body = sse(
        CREATED,
        done(0, MESSAGE),
        _text_done(1, 0, "Bye.", "msg_2"),
        done(1, second),
        completed(MESSAGE, second),
    )
    assert text(updates(body)) == "Hello.Bye."


def test_a_refusal_done_after_its_item_done_adds_nothing() -> None:
    refusing = {**MESSAGE, "content": [{"type": "refusal", "refusal": "No."}]}
    late = {
        "type": "response.refusal.done",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "refusal": "No.",
    }
    assert text(updates(sse(CREATED, done(0, refusing), late, completed(refusing)))) == "No."


def _summary_done(part: int, value: str) -> dict[str, Any]:
    return {
        "type": "response.reasoning_summary_text.done",
        "item_id": "rs_1",
        "output_index": 0,
        "summary_index": part,
        "text": value,
    }


MULTI_SUMMARY = {
    **REASONING,
    "summary": [
        {"type": "summary_text", "text": "First."},
        {"type": "summary_text", "text": "Second."},
    ],
}


def test_summary_parts_only_as_done_events_each_come_once() -> None:
    body = sse(
        CREATED,
        _summary_done(0, "First."),
        _summary_done(1, "Second."),
        done(0, MULTI_SUMMARY),
        completed(MULTI_SUMMARY),
    )
    got = updates(body)
    assert reasoning_text(got) == "First.Second."
    assert [i["id"] for i in kept_items(got)] == ["rs_1"]


# A stream of a server that sends no deltas: each item's part .done events in order,
# its output_item.done before or after all of them, the two items' events interleaved
# any way; then the final output. (An item done between its parts' .done events: see
# the report of this review.)
_REASONING_PARTS = [_summary_done(0, "First."), _summary_done(1, "Second.")]
_MESSAGE_PARTS = [_text_done(1, 0, "One. "), _text_done(1, 1, "Two.")]


@settings(max_examples=60, deadline=None)
@given(st.booleans(), st.booleans(), st.permutations("rrrmmm"))
def test_no_delta_events_in_any_order_give_each_text_once(
    reasoning_item_first: bool, message_item_first: bool, interleaving: str
) -> None:
    reasoning = [done(0, MULTI_SUMMARY), *_REASONING_PARTS]
    if not reasoning_item_first:
        reasoning = [*_REASONING_PARTS, done(0, MULTI_SUMMARY)]
    message = [done(1, TWO_PARTS), *_MESSAGE_PARTS]
    if not message_item_first:
        message = [*_MESSAGE_PARTS, done(1, TWO_PARTS)]
    queues = {"r": iter(reasoning), "m": iter(message)}
    events = [next(queues[label]) for label in interleaving]
    got = updates(sse(CREATED, *events, completed(MULTI_SUMMARY, TWO_PARTS)))
    assert reasoning_text(got) == "First.Second."
    assert text(got) == "One. Two."
    assert sum(1 for i in kept_items(got) if i["type"] == "reasoning") == 1


# ------------------------------------------------------- from_openai's reasoning


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"reasoning_content": "R"}, "R"),
        ({"reasoning": "R"}, "R"),
        ({"reasoning_content": None, "reasoning": "R"}, "R"),
        ({"reasoning_content": "C", "reasoning": "R"}, "C"),
        ({"reasoning": {"effort": "low", "summary": None}}, None),  # (a gateway's object)
        ({"reasoning": ["R"]}, None),
        ({}, None),
    ],
)
def test_from_openai_reads_reasoning_text_only(fields: dict[str, Any], expected: Any) -> None:
    message = ChatMessage.from_openai({"role": "assistant", "content": "Hi.", **fields})
    assert message.reasoning == expected
    assert message.content == "Hi."


def test_reasoning_read_from_the_reasoning_field_goes_back_as_reasoning_content() -> None:
    message = ChatMessage.from_openai({"role": "assistant", "content": "Hi.", "reasoning": "R"})
    again = ChatMessage.from_openai(message.to_openai())
    assert again.reasoning == "R"


# -------------------------------------------------- from_anthropic's user text blocks


def test_a_users_text_blocks_join_with_a_blank_line_an_assistants_as_they_came() -> None:
    wire = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}],
        },
    ]
    user, assistant = from_anthropic(None, wire)
    assert (user.content, assistant.content) == ("a\n\nb", "cd")


def test_tool_results_then_two_text_blocks_give_the_users_text_a_blank_line_apart() -> None:
    content = [
        {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    result, user = from_anthropic(None, [{"role": "user", "content": content}])
    assert (result.tool_call_id, result.content, user.content) == ("t1", "42", "a\n\nb")


_texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30
).filter(str.strip)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]), _texts), max_size=6))
def test_what_to_anthropic_writes_from_anthropic_reads_back(turns: list[tuple[str, str]]) -> None:
    """rafrx writes each message's text as one block: the blank-line join never adds
    to a round trip of its own messages."""
    messages = [ChatMessage.user(t) if r == "user" else ChatMessage.assistant(t) for r, t in turns]
    system, wire = to_anthropic(messages)
    back = from_anthropic(system, wire)
    assert [(m.role.value, m.content) for m in back] == [
        (m.role.value, m.content) for m in messages
    ]
