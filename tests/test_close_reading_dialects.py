"""A close, line-by-line reading of the OpenAI chat and Responses dialects.

The angle is a code reviewer's: for each branch of
``rafrx/sources/dialects/openai_chat.py`` and ``openai_responses.py`` (and the
``_common.py`` helpers they use), the question was "what input reaches this, and
is the result right?". These tests pin the answers that hold:

* which key each stage uses: choice index, tool call wire index vs id,
  ``output_index`` vs ``item_id``;
* a second item of the same kind (a second call, a second message);
* what arrives only in ``.done`` events or only in ``response.completed``;
* finish reasons and usage (``incomplete_details``, ``content_filter``,
  ``length``, the token details);
* refusals, reasoning summaries vs reasoning text, custom tool calls;
* agreement with openai-python's own accumulators (``ChatCompletionStreamState``,
  ``ResponseStreamState``) on the same events.

Everything goes through ``rafrx.sources.from_sse`` over hand-made SSE bodies.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import NOT_GIVEN
from openai._models import construct_type
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from reactivex import operators as rx

from rafrx import operators as ops
from rafrx.errors import IncompleteStream, ProviderError
from rafrx.messages import CUSTOM_TOOL_CALL_REF, FUNCTION_CALL_REF, MESSAGE_REF
from rafrx.response import AgentResponse, FinishReason, Usage
from rafrx.sources import from_sse
from rafrx.updates import Finish, ReasoningDelta, TextDelta, ToolCallArgs, ToolCallDelta

CHAT = "openai-chat"
RESP = "openai-responses"


def sse(*events: dict[str, Any], done: bool = False) -> bytes:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def updates(body: bytes, dialect: str) -> list[Any]:
    return from_sse(body, dialect=dialect).pipe(rx.to_list()).run()


def aggregate(body: bytes, dialect: str) -> AgentResponse:
    return from_sse(body, dialect=dialect).pipe(ops.convert(), ops.aggregate()).run()


def finish_of(body: bytes, dialect: str) -> Finish:
    (finish,) = [u for u in updates(body, dialect) if isinstance(u, Finish)]
    return finish


def args_of(response: AgentResponse) -> dict[str, Any]:
    return {call.id: call.arguments for call in response.tool_calls}


# ------------------------------------------------------------------ chat helpers


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict:
    choice: dict[str, Any] = {"index": extra.pop("choice_index", 0), "delta": delta or {}}
    if finish is not None:
        choice["finish_reason"] = finish
    return {
        "id": "chatcmpl-1",
        "model": "gpt",
        "object": "chat.completion.chunk",
        "choices": [choice],
        **extra,
    }


def tool(index: int | None, args: str, call_id: str | None = None, name: str | None = None) -> dict:
    entry: dict[str, Any] = {"function": {"arguments": args}}
    if index is not None:
        entry["index"] = index
    if call_id is not None:
        entry["id"] = call_id
        entry["type"] = "function"
    if name is not None:
        entry["function"]["name"] = name
    return chunk({"tool_calls": [entry]})


# ------------------------------------------------------------------ chat: keys


def test_chat_only_choice_zero_is_read_even_when_choice_one_comes_first() -> None:
    both = {
        "id": "c",
        "model": "m",
        "choices": [
            {"index": 1, "delta": {"content": "other"}, "finish_reason": "length"},
            {"index": 0, "delta": {"content": "mine"}, "finish_reason": "stop"},
        ],
    }
    response = aggregate(sse(both, done=True), CHAT)
    assert response.text == "mine"
    assert response.finish_reason is FinishReason.STOP


def test_chat_interleaved_parallel_calls_are_keyed_by_wire_index_not_order() -> None:
    body = sse(
        tool(0, '{"a": ', "call_a", "f"),
        tool(1, '{"b": ', "call_b", "g"),
        tool(0, "1}"),
        tool(1, "2}"),
        chunk(finish="tool_calls"),
        done=True,
    )
    response = aggregate(body, CHAT)
    assert args_of(response) == {"call_a": {"a": 1}, "call_b": {"b": 2}}
    assert [c.name for c in response.tool_calls] == ["f", "g"]


def test_chat_index_less_entries_continue_the_last_call_and_known_ids_go_back_to_theirs() -> None:
    body = sse(
        tool(None, '{"a": ', "call_a", "f"),
        tool(None, '{"b": 2}', "call_b", "g"),
        tool(None, "1}", "call_a"),  # its id again: call_a's continuation
        chunk(finish="tool_calls"),
        done=True,
    )
    assert args_of(aggregate(body, CHAT)) == {"call_a": {"a": 1}, "call_b": {"b": 2}}


def test_chat_first_call_at_a_nonzero_wire_index_keeps_that_index() -> None:
    body = sse(tool(2, "{}", "call_x", "f"), chunk(finish="tool_calls"), done=True)
    deltas = [u for u in updates(body, CHAT) if isinstance(u, ToolCallDelta)]
    assert [d.index for d in deltas] == [2]


# ------------------------------------------------------------------ chat: finish and usage


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", FinishReason.STOP),
        ("length", FinishReason.LENGTH),
        ("tool_calls", FinishReason.TOOL_CALLS),
        ("function_call", FinishReason.TOOL_CALLS),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("something_new", FinishReason.OTHER),
    ],
)
def test_chat_finish_reasons_map_to_rafrx_ones(reason: str, expected: FinishReason) -> None:
    body = sse(chunk({"content": "x"}), chunk(finish=reason), done=True)
    assert finish_of(body, CHAT).finish_reason is expected


def test_chat_last_non_null_finish_reason_wins_and_a_null_one_does_not_reset_it() -> None:
    body = sse(chunk(finish="length"), chunk({"content": ""}), done=True)
    assert finish_of(body, CHAT).finish_reason is FinishReason.LENGTH


def test_chat_done_without_any_finish_reason_is_other() -> None:
    body = sse(chunk({"content": "x"}), done=True)
    assert finish_of(body, CHAT).finish_reason is FinishReason.OTHER


def test_chat_usage_only_chunk_maps_every_detail() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 7,
        "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    last = {
        "id": "c",
        "model": "m",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": usage,
    }
    body = sse(chunk({"content": "x"}, finish="stop"), last, done=True)
    assert finish_of(body, CHAT).usage == Usage(10, 7, 17, reasoning_tokens=3, cached_tokens=4)


def test_chat_usage_without_total_is_the_sum_and_null_usage_chunks_do_not_erase_it() -> None:
    body = sse(
        chunk({"content": "x"}, usage={"prompt_tokens": 2, "completion_tokens": 3}),
        chunk(finish="stop", usage=None),
        done=True,
    )
    assert finish_of(body, CHAT).usage == Usage(2, 3, 5)


def test_chat_end_of_input_after_a_finish_reason_finishes_without_done() -> None:
    finish = finish_of(sse(chunk({"content": "x"}, finish="stop")), CHAT)
    assert finish.finish_reason is FinishReason.STOP


def test_chat_end_of_input_without_done_or_finish_reason_is_incomplete() -> None:
    with pytest.raises(IncompleteStream):
        updates(sse(chunk({"content": "x"})), CHAT)


# ------------------------------------------------------------------ chat: refusal, custom calls


def test_chat_refusal_is_the_text_the_user_sees() -> None:
    body = sse(
        chunk({"refusal": "I can't "}), chunk({"refusal": "help."}, finish="stop"), done=True
    )
    assert aggregate(body, CHAT).text == "I can't help."


def custom(index: int, text: str, call_id: str | None = None, name: str | None = None) -> dict:
    entry: dict[str, Any] = {"index": index, "type": "custom", "custom": {"input": text}}
    if call_id is not None:
        entry["id"] = call_id
    if name is not None:
        entry["custom"]["name"] = name
    return chunk({"tool_calls": [entry]})


def test_chat_custom_call_input_is_escaped_and_closed_at_a_good_finish() -> None:
    body = sse(
        custom(0, 'say "hi"\n', "call_c", "shell"),
        custom(0, "done\\"),
        chunk(finish="tool_calls"),
        done=True,
    )
    got = updates(body, CHAT)
    response = aggregate(body, CHAT)
    assert args_of(response) == {"call_c": {"input": 'say "hi"\ndone\\'}}
    refs = [u.provider_data for u in got if isinstance(u, ReasoningDelta) and u.provider_data]
    assert refs == [{"type": CUSTOM_TOOL_CALL_REF, "call_id": "call_c"}]


def test_chat_custom_call_cut_by_length_is_left_open() -> None:
    body = sse(custom(0, "partial", "call_c", "shell"), chunk(finish="length"), done=True)
    args = "".join(u.arguments_delta for u in updates(body, CHAT) if isinstance(u, ToolCallDelta))
    assert args == '{"input": "partial'


def test_chat_custom_call_then_a_function_call_at_the_same_index_closes_the_custom_one() -> None:
    body = sse(
        custom(0, "x", "call_c", "shell"),
        tool(0, "{}", "call_f", "f"),
        chunk(finish="tool_calls"),
        done=True,
    )
    response = aggregate(body, CHAT)
    assert args_of(response) == {"call_c": {"input": "x"}, "call_f": {}}


# ------------------------------------------------------------------ chat: the SDK as oracle


def sdk_chat(events: list[dict[str, Any]]) -> Any:
    state = ChatCompletionStreamState()
    for event in events:
        state.handle_chunk(construct_type(type_=ChatCompletionChunk, value=event))
    return state.current_completion_snapshot


_pieces = st.lists(st.text('ab"\\é{} ', min_size=1, max_size=4), min_size=1, max_size=4)


@settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(text=_pieces, first=_pieces, second=_pieces, order=st.randoms(use_true_random=False))
def test_chat_text_and_interleaved_calls_agree_with_openai_python(
    text: list[str], first: list[str], second: list[str], order: Any
) -> None:
    pieces = [(0, json.dumps("".join(first))), (1, json.dumps("".join(second)))]
    events = [chunk({"role": "assistant", "content": t}) for t in text]
    events += [tool(0, "", "call_0", "f"), tool(1, "", "call_1", "g")]
    split = [(i, a[k : k + 3]) for i, a in pieces for k in range(0, len(a), 3)]
    # interleave the two calls' pieces, each call's own pieces kept in order
    queues = {0: [p for p in split if p[0] == 0], 1: [p for p in split if p[0] == 1]}
    while queues[0] or queues[1]:
        i = order.choice([k for k in (0, 1) if queues[k]])
        events.append(tool(*queues[i].pop(0)))
    events.append(chunk(finish="tool_calls"))
    ours = aggregate(sse(*events, done=True), CHAT)
    theirs = sdk_chat(events).choices[0]
    assert ours.text == theirs.message.content
    assert [(c.id, c.name, c.arguments) for c in ours.tool_calls] == [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in theirs.message.tool_calls
    ]
    assert ours.finish_reason.value == theirs.finish_reason


# ------------------------------------------------------------------ responses helpers

CREATED = {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5"}}


def added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def item_done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def ev(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": f"response.{kind}", **fields}


def completed(*output: dict[str, Any], **response: Any) -> dict[str, Any]:
    return ev(
        "completed",
        response={"id": "resp_1", "status": "completed", "output": list(output), **response},
    )


def fcall(item_id: str, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def message(item_id: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": list(parts),
    }


def out_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


# ------------------------------------------------------------------ responses: keys


def test_responses_interleaved_call_arguments_are_keyed_by_item_id_not_output_index() -> None:
    a, b = fcall("fc_a", "call_a", "f"), fcall("fc_b", "call_b", "g")
    body = sse(
        CREATED,
        added(0, a),
        added(1, b),
        # output_index deliberately swapped: item_id is what names the call
        ev("function_call_arguments.delta", item_id="fc_b", output_index=0, delta='{"b": '),
        ev("function_call_arguments.delta", item_id="fc_a", output_index=1, delta='{"a": '),
        ev("function_call_arguments.delta", item_id="fc_a", output_index=1, delta="1}"),
        ev("function_call_arguments.delta", item_id="fc_b", output_index=0, delta="2}"),
        item_done(0, {**a, "arguments": '{"a": 1}'}),
        item_done(1, {**b, "arguments": '{"b": 2}'}),
        completed(),
    )
    response = aggregate(body, RESP)
    assert args_of(response) == {"call_a": {"a": 1}, "call_b": {"b": 2}}
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_responses_a_second_item_repeating_a_call_id_is_a_call_of_its_own() -> None:
    first, second = fcall("fc_1", "call_1", "f"), fcall("fc_2", "call_1", "f")
    body = sse(
        CREATED,
        added(0, first),
        item_done(0, {**first, "arguments": '{"n": 1}'}),
        added(1, second),
        item_done(1, {**second, "arguments": '{"n": 2}'}),
        completed(),
    )
    assert args_of(aggregate(body, RESP)) == {"call_1": {"n": 1}, "call_1_2": {"n": 2}}


def test_responses_two_message_items_give_both_texts_once() -> None:
    body = sse(
        CREATED,
        added(0, message("msg_1")),
        ev("output_text.delta", item_id="msg_1", output_index=0, content_index=0, delta="One. "),
        ev("output_text.done", item_id="msg_1", output_index=0, content_index=0, text="One. "),
        item_done(0, message("msg_1", out_text("One. "))),
        added(1, message("msg_2")),
        ev("output_text.delta", item_id="msg_2", output_index=1, content_index=0, delta="Two."),
        item_done(1, message("msg_2", out_text("Two."))),
        completed(message("msg_1", out_text("One. ")), message("msg_2", out_text("Two."))),
    )
    assert aggregate(body, RESP).text == "One. Two."


# ------------------------------------------------------------------ responses: .done-only fields


def test_responses_arguments_only_in_the_arguments_done_event_come_once() -> None:
    call = fcall("fc_1", "call_1", "f")
    body = sse(
        CREATED,
        added(0, call),
        ev("function_call_arguments.done", item_id="fc_1", output_index=0, arguments='{"x": 1}'),
        item_done(0, {**call, "arguments": '{"x": 1}'}),
        completed(),
    )
    got = updates(body, RESP)
    assert [u.args_delta for u in got if isinstance(u, ToolCallArgs)] == ['{"x": 1}']


def test_responses_arguments_only_in_the_finished_item_are_delivered() -> None:
    call = fcall("fc_1", "call_1", "f")
    body = sse(
        CREATED, added(0, call), item_done(0, {**call, "arguments": '{"x": 1}'}), completed()
    )
    assert args_of(aggregate(body, RESP)) == {"call_1": {"x": 1}}


def test_responses_call_and_message_only_in_response_completed_are_delivered() -> None:
    body = sse(
        CREATED,
        completed(message("msg_1", out_text("Calling.")), fcall("fc_1", "call_1", "f", "{}")),
    )
    response = aggregate(body, RESP)
    assert response.text == "Calling."
    assert args_of(response) == {"call_1": {}}
    assert response.finish_reason is FinishReason.TOOL_CALLS


def test_responses_text_only_in_output_text_done_is_delivered_once() -> None:
    body = sse(
        CREATED,
        added(0, message("msg_1")),
        ev("output_text.done", item_id="msg_1", output_index=0, content_index=0, text="Hi."),
        item_done(0, message("msg_1", out_text("Hi."))),
        completed(message("msg_1", out_text("Hi."))),
    )
    assert [u.delta for u in updates(body, RESP) if isinstance(u, TextDelta)] == ["Hi."]


# ------------------------------------------------------------------ responses: finish and usage


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("max_output_tokens", FinishReason.LENGTH),
        ("content_filter", FinishReason.CONTENT_FILTER),
        (None, FinishReason.OTHER),
    ],
)
def test_responses_incomplete_maps_its_reason(reason: str | None, expected: FinishReason) -> None:
    details = None if reason is None else {"reason": reason}
    body = sse(
        CREATED,
        ev("output_text.delta", item_id="msg_1", output_index=0, content_index=0, delta="Cut"),
        ev(
            "incomplete",
            response={
                "status": "incomplete",
                "incomplete_details": details,
                "usage": {"input_tokens": 1, "output_tokens": 2},
            },
        ),
    )
    finish = finish_of(body, RESP)
    assert finish.finish_reason is expected
    assert finish.usage == Usage(1, 2, 3)


def test_responses_completed_with_status_incomplete_is_a_cut_response() -> None:
    body = sse(
        CREATED, completed(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    )
    assert finish_of(body, RESP).finish_reason is FinishReason.LENGTH


def test_responses_a_call_cut_by_incomplete_is_not_ended_from_the_final_output() -> None:
    call = fcall("fc_1", "call_1", "f")
    body = sse(
        CREATED,
        added(0, call),
        ev("function_call_arguments.delta", item_id="fc_1", output_index=0, delta='{"x": '),
        ev(
            "incomplete",
            response={
                "output": [{**call, "arguments": '{"x": ', "status": "incomplete"}],
                "incomplete_details": {"reason": "max_output_tokens"},
            },
        ),
    )
    got = updates(body, RESP)
    assert [type(u).__name__ for u in got][-2:] == ["ToolCallArgs", "Finish"]
    assert got[-1].finish_reason is FinishReason.LENGTH


def test_responses_usage_maps_input_and_output_details() -> None:
    usage = {
        "input_tokens": 50,
        "input_tokens_details": {"cached_tokens": 20},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 80,
    }
    body = sse(CREATED, completed(usage=usage))
    assert finish_of(body, RESP).usage == Usage(50, 30, 80, reasoning_tokens=12, cached_tokens=20)


def test_responses_failed_is_a_provider_error_with_its_code_as_type() -> None:
    body = sse(
        CREATED,
        ev(
            "failed",
            response={"status": "failed", "error": {"code": "server_error", "message": "boom"}},
        ),
    )
    with pytest.raises(ProviderError) as caught:
        updates(body, RESP)
    assert caught.value.message == "boom"
    assert caught.value.error_type == "server_error"
    assert caught.value.retryable


def test_responses_done_marker_before_completed_is_an_incomplete_stream() -> None:
    body = sse(CREATED, ev("output_text.delta", item_id="m", delta="x"), done=True)
    with pytest.raises(IncompleteStream):
        updates(body, RESP)


# ------------------------------------------------------------------ responses: refusal, reasoning


def test_responses_refusal_deltas_are_text_and_the_message_goes_back_as_a_refusal() -> None:
    refusal = {"type": "refusal", "refusal": "I can't help."}
    body = sse(
        CREATED,
        added(0, message("msg_1")),
        ev("refusal.delta", item_id="msg_1", output_index=0, content_index=0, delta="I can't "),
        ev("refusal.delta", item_id="msg_1", output_index=0, content_index=0, delta="help."),
        ev(
            "refusal.done",
            item_id="msg_1",
            output_index=0,
            content_index=0,
            refusal="I can't help.",
        ),
        item_done(0, message("msg_1", refusal)),
        ev(
            "output_item.done",
            output_index=1,
            item={"type": "reasoning", "id": "rs_9", "summary": []},
        ),
        completed(),
    )
    got = updates(body, RESP)
    assert "".join(u.delta for u in got if isinstance(u, TextDelta)) == "I can't help."
    refs = [
        u.provider_data
        for u in got
        if isinstance(u, ReasoningDelta)
        and u.provider_data
        and u.provider_data.get("type") == MESSAGE_REF
    ]
    assert refs == [{"type": MESSAGE_REF, "id": "msg_1", "text": "I can't help.", "refusal": True}]


def test_responses_refusal_only_in_refusal_done_is_delivered() -> None:
    body = sse(
        CREATED,
        ev("refusal.done", item_id="msg_1", output_index=0, content_index=0, refusal="No."),
        item_done(0, message("msg_1", {"type": "refusal", "refusal": "No."})),
        completed(),
    )
    assert aggregate(body, RESP).text == "No."


def test_responses_summary_parts_and_reasoning_text_are_all_reasoning_not_text() -> None:
    body = sse(
        CREATED,
        added(0, {"type": "reasoning", "id": "rs_1", "summary": []}),
        ev(
            "reasoning_summary_text.delta",
            item_id="rs_1",
            output_index=0,
            summary_index=0,
            delta="First. ",
        ),
        ev(
            "reasoning_summary_text.delta",
            item_id="rs_1",
            output_index=0,
            summary_index=1,
            delta="Second.",
        ),
        ev(
            "reasoning_summary_text.done",
            item_id="rs_1",
            output_index=0,
            summary_index=1,
            text="Second.",
        ),
        item_done(
            0,
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [
                    {"type": "summary_text", "text": "First. "},
                    {"type": "summary_text", "text": "Second."},
                ],
            },
        ),
        ev("output_text.delta", item_id="msg_1", output_index=1, content_index=0, delta="Hi"),
        completed(),
    )
    response = aggregate(body, RESP)
    assert response.reasoning_text == "First. Second."
    assert response.text == "Hi"


def test_responses_function_call_after_reasoning_is_named_by_its_item_id() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E"}
    call = fcall("fc_1", "call_1", "f", "{}")
    body = sse(CREATED, item_done(0, reasoning), item_done(1, call), completed())
    blocks = [
        u.provider_data
        for u in updates(body, RESP)
        if isinstance(u, ReasoningDelta) and u.provider_data
    ]
    assert blocks == [reasoning, {"type": FUNCTION_CALL_REF, "id": "fc_1", "call_id": "call_1"}]


# ------------------------------------------------------------------ responses: custom tool calls


def custom_item(item_id: str = "ctc_1", call_id: str = "call_c", text: str = "") -> dict:
    return {
        "type": "custom_tool_call",
        "id": item_id,
        "call_id": call_id,
        "name": "shell",
        "input": text,
    }


def test_responses_custom_call_input_deltas_are_escaped_into_input_arguments() -> None:
    body = sse(
        CREATED,
        added(0, custom_item()),
        ev("custom_tool_call_input.delta", item_id="ctc_1", output_index=0, delta='echo "a'),
        ev("custom_tool_call_input.delta", item_id="ctc_1", output_index=0, delta='\\b"\n'),
        ev("custom_tool_call_input.done", item_id="ctc_1", output_index=0, input='echo "a\\b"\n'),
        item_done(0, custom_item(text='echo "a\\b"\n')),
        completed(),
    )
    got = updates(body, RESP)
    response = aggregate(body, RESP)
    assert args_of(response) == {"call_c": {"input": 'echo "a\\b"\n'}}
    assert response.finish_reason is FinishReason.TOOL_CALLS
    refs = [u.provider_data for u in got if isinstance(u, ReasoningDelta) and u.provider_data]
    assert refs == [{"type": CUSTOM_TOOL_CALL_REF, "call_id": "call_c", "id": "ctc_1"}]


def test_responses_custom_call_input_only_in_its_done_event_is_escaped_once() -> None:
    body = sse(
        CREATED,
        added(0, custom_item()),
        ev("custom_tool_call_input.done", item_id="ctc_1", output_index=0, input='a"b'),
        item_done(0, custom_item(text='a"b')),
        completed(),
    )
    assert args_of(aggregate(body, RESP)) == {"call_c": {"input": 'a"b'}}


# ------------------------------------------------------------------ responses: the SDK as oracle


def sdk_responses(events: list[dict[str, Any]]) -> Any:
    state = ResponseStreamState(input_tools=NOT_GIVEN, text_format=NOT_GIVEN)
    final = None
    for i, event in enumerate(events):
        typed = construct_type(type_=ResponseStreamEvent, value={"sequence_number": i, **event})
        for out in state.handle_event(typed):
            if out.type == "response.completed":
                final = out.response
    return final


def test_responses_reasoning_message_and_call_agree_with_openai_python() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Think."}],
    }
    msg = message("msg_1", out_text("Let me check."))
    call = fcall("fc_1", "call_1", "weather", '{"city": "Oslo"}')
    created = {
        "type": "response.created",
        "response": {
            "id": "resp_1",
            "model": "gpt-5",
            "object": "response",
            "created_at": 0,
            "status": "in_progress",
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
    }
    events = [
        created,
        added(0, {**reasoning, "summary": []}),
        ev(
            "reasoning_summary_part.added",
            item_id="rs_1",
            output_index=0,
            summary_index=0,
            part={"type": "summary_text", "text": ""},
        ),
        ev(
            "reasoning_summary_text.delta",
            item_id="rs_1",
            output_index=0,
            summary_index=0,
            delta="Think.",
        ),
        item_done(0, reasoning),
        added(1, {**msg, "content": []}),
        ev(
            "content_part.added",
            item_id="msg_1",
            output_index=1,
            content_index=0,
            part=out_text(""),
        ),
        ev(
            "output_text.delta",
            item_id="msg_1",
            output_index=1,
            content_index=0,
            delta="Let me ",
            logprobs=[],
        ),
        ev(
            "output_text.delta",
            item_id="msg_1",
            output_index=1,
            content_index=0,
            delta="check.",
            logprobs=[],
        ),
        item_done(1, msg),
        added(2, {**call, "arguments": ""}),
        ev("function_call_arguments.delta", item_id="fc_1", output_index=2, delta='{"city": '),
        ev("function_call_arguments.delta", item_id="fc_1", output_index=2, delta='"Oslo"}'),
        item_done(2, call),
        {
            "type": "response.completed",
            "response": {
                **created["response"],
                "status": "completed",
                "output": [reasoning, msg, call],
            },
        },
    ]
    ours = aggregate(sse(*events), RESP)
    theirs = sdk_responses(events)
    assert ours.text == theirs.output_text
    assert ours.reasoning_text == "".join(s.text for s in theirs.output[0].summary)
    sdk_call = theirs.output[2]
    assert [(c.id, c.name, c.arguments) for c in ours.tool_calls] == [
        (sdk_call.call_id, sdk_call.name, json.loads(sdk_call.arguments))
    ]
