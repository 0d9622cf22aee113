"""Regression tests for the bugs a close, line-by-line reading of rafrx's code found
(found by the review of the first two rounds' fixes).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import httpx2
import openai
import pytest
import reactivex
from reactivex.subject import Subject

from rafrx import Agent, ChatMessage
from rafrx import content as c
from rafrx.errors import HTTPStatusError, ProviderError
from rafrx.events import ResponseStartedEvent
from rafrx.notebook import live, text_display
from rafrx.response import AgentResponseResult
from rafrx.sources.clients import OpenAIChatClient
from rafrx.tools import ToolApprovalResponse, tool


def _rate_limit_error() -> openai.RateLimitError:
    """What the OpenAI SDK raises on HTTP 429 (``APIStatusError(message, *, response, body)``)."""
    request = httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    response = httpx2.Response(429, request=request, json={"error": {"message": "slow down"}})
    return openai.RateLimitError("slow down", response=response, body=None)


class _SDKClient:
    """A user's ChatClient over the OpenAI SDK (the Agent's ChatClient protocol): the
    SDK's error reaches the agent's subscriber as it is."""

    def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
        return reactivex.throw(_rate_limit_error())


# ------------------------------------------------------------------ live view: detached()


def test_live_view_of_a_turn_failing_with_an_sdk_error_raises_that_error() -> None:
    """What the user does: in a notebook, ``view = live(agent.run("hi"))`` with an Agent over
    their own ChatClient built on the OpenAI SDK, then ``await view`` (or ``view.response``).
    The SDK fails the call with ``openai.RateLimitError``.

    What happens: ``TypeError: APIStatusError.__init__() missing 2 required keyword-only
    arguments: 'response' and 'body'``. Today's fix makes ``LiveView.response`` raise
    ``detached(self._error)`` (rafrx/notebook/_live.py:97), and ``detached`` is
    ``copy.copy(error)`` (rafrx/_cycles.py:149), which rebuilds the error as
    ``type(error)(*error.args)``: any exception whose constructor takes other arguments
    than its ``args`` (the OpenAI and Anthropic SDKs' status errors, httpx's
    ``HTTPStatusError``, most user-defined errors with keyword-only fields) cannot be
    copied, and the copy's TypeError replaces the stream's error.

    What should happen: the stream's own error is raised, as it was before today's change
    (``raise self._error``) and as the docstring of ``LiveView.response`` promises ("the
    stream failed"): the Agent's, typed and caused by the SDK's ``openai.RateLimitError``
    (a client's error of another library is typed, with ``.partial``, since session 9;
    one with an HTTP status is the ``HTTPStatusError`` of that status since session 10);
    the view raises it as it is.
    """

    async def main() -> BaseException:
        view = live(Agent(_SDKClient()).run("hi"), display=text_display(io.StringIO()))
        try:
            await view
        except BaseException as exc:
            return exc
        raise AssertionError("the view did not fail")

    raised = asyncio.run(main())
    # (the SDK's 429 is the HTTPStatusError of its status since session 10: retryable)
    assert isinstance(raised, HTTPStatusError), f"{type(raised).__name__}: {raised}"
    assert raised.status == 429
    assert "RateLimitError: slow down" in str(raised)  # (a view's copy has no __cause__)


def test_notes_added_to_one_raise_of_view_response_do_not_reach_the_next() -> None:
    """What the user does: ``view.response`` of a failed stream whose error carries a note
    (``let_go`` adds one when it keeps a traceback as text, a retry loop another); their
    code adds context as it re-raises (``except RafrxError as e: e.add_note(...); raise``),
    and later reads ``view.response`` again.

    What happens: every raise shows the notes of all the raises before it. ``detached`` is
    a shallow ``copy.copy`` (rafrx/_cycles.py:149), so each copy shares the kept error's
    ``__notes__`` list; ``add_note`` on the raised copy appends to the kept error.

    What should happen: each raise is a detached copy ("raise a new detached copy each
    time", ``detached``'s docstring): what is done to one raise does not reach the kept
    error or the next raise. The notes the error had stay; the user's do not pile up.
    """

    async def main() -> list[list[str]]:
        error = ProviderError("overloaded")
        error.add_note("Traceback (most recent call last; kept as text, with no frames):")
        view = live(reactivex.throw(error), display=text_display(io.StringIO()))
        seen = []
        for attempt in range(3):
            try:
                await view
            except ProviderError as exc:
                seen.append(list(exc.__notes__))
                exc.add_note(f"while handling attempt {attempt}")
        return seen

    seen = asyncio.run(main())
    assert len(seen) == 3
    assert seen[2] == seen[0], seen


# ------------------------------------------------------------------ LiveState: the deltas


# ------------------------------------------------------------------ clients: the sibling entry


def test_client_stream_given_openai_message_dicts_names_them() -> None:
    """What the user does: ``client.stream([{"role": "user", "content": "hi"}])`` with
    rafrx's OpenAIChatClient, the OpenAI SDK's way of giving messages.

    What happens: ``AttributeError: 'dict' object has no attribute 'tool_calls'``, from
    deep in the payload builder. Today's fix gave ``Agent.run`` a TypeError naming the
    dict and pointing at ``ChatMessage.from_openai`` (agent.py ``_as_input``), but the
    client's own ``stream()`` (rafrx/sources/clients.py:469-470), the other entry point
    for the same messages, still fails with an unrelated AttributeError.

    What should happen: a TypeError that says the messages are ChatMessages and names
    ``ChatMessage.from_openai``, as ``Agent.run`` now does for the same input.
    """
    client = OpenAIChatClient("http://127.0.0.1:9", model="m")
    with pytest.raises(TypeError, match="from_openai"):
        client.stream([{"role": "user", "content": "hi"}])  # type: ignore[list-item]


def test_client_stream_given_a_tools_mapping_names_it() -> None:
    """What the user does: ``client.stream(messages, tools={"get_time": get_time})`` (a
    name-to-function mapping), or ``tools={"type": "web_search"}`` (one server tool).

    What happens: ``AttributeError: 'str' object has no attribute 'name'``: the mapping's
    keys are taken as tools (rafrx/sources/clients.py:469, ``[*(tools or ())]``). Today's
    fix refuses exactly this for ``Agent(tools=...)`` with a TypeError ("an agent's tools
    are a list (tools=[...]), not one dict"); the client's entry point is left out.

    What should happen: a TypeError naming the mapping, as ``Agent`` now gives.
    """

    @tool
    def get_time(city: str) -> str:
        """The time in a city."""
        return "12:00"

    client = OpenAIChatClient("http://127.0.0.1:9", model="m")
    with pytest.raises(TypeError, match="dict"):
        client.stream([ChatMessage.user("time?")], tools={"get_time": get_time})  # type: ignore[arg-type]


# ------------------------------------------------------------------ execute_tools: closed set

_RUNS: list[str] = []


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    _RUNS.append(path)
    return f"deleted {path}"


def _calling(call_id: str, path: str) -> AgentResponseResult:
    content = c.ToolCallingContent(call_id, "delete", {"path": path}, json.dumps({"path": path}))
    return AgentResponseResult("resp", "m", None, (content,))


def test_an_approval_given_on_seeing_a_reused_call_id_is_not_dropped() -> None:
    """What the user does: ``execute_tools([delete], answers)`` over a stream of several
    LLM calls (the operator clears its seen ids at each ``ResponseStartedEvent``: "an id
    may come back in it"), with a UI that has "always allow delete" on and so approves
    a call as soon as it sees the call (``ToolCallingContent``) go by, before its
    request event. The second LLM call reuses the id ``c1`` (Kimi, Mistral and Gemini
    adapters give every response the same ids).

    What happens: the first call runs; the second call's approval, sent as the UI sees
    the call, is dropped: ``c1`` is still in ``_Runner.closed`` from the first call
    (rafrx/operators/_execute_tools.py ``take_answer``, lines 159-161), which is only
    cleared when the request is emitted (``approve``, line 331), after the answer came.
    The call waits for an answer that was thrown away and is denied at
    ``approval_timeout`` (with no timeout it waits forever). Before today's change it
    ran. The same answer for a fresh id (``c2``) is kept (``answers.setdefault``): only
    a reused id loses it.

    What should happen: the second call runs. An answer that comes after the id was
    seen again in a new LLM call answers that new call; ``closed`` is meant to drop
    "a later answer to one (a double click, a late one) ... until the id is asked about
    again" (the comment on ``closed``), and the id comes again as soon as its
    ``ToolCallingContent`` is seen (``on_next`` already re-opens ids of upstream
    request events before passing them on: "answers may come as it is seen").
    """
    from rafrx import operators as ops

    _RUNS.clear()

    async def main() -> list[str | None]:
        answers: Subject[ToolApprovalResponse] = Subject()
        upstream: Subject[AgentResponseResult] = Subject()
        items: list[AgentResponseResult] = []
        done = asyncio.get_running_loop().create_future()

        def on_item(result: AgentResponseResult) -> None:
            items.append(result)
            for content in result.contents:  # "always allow delete": yes on sight
                if isinstance(content, c.ToolCallingContent):
                    answers.on_next(ToolApprovalResponse(content.call_id, True))

        upstream.pipe(ops.execute_tools([delete], answers, approval_timeout=0.5)).subscribe(
            on_item, done.set_exception, lambda: done.set_result(None)
        )
        upstream.on_next(_calling("c1", "a"))
        while not _RUNS:
            await asyncio.sleep(0.01)
        upstream.on_next(AgentResponseResult("resp_2", "m", None, (), (ResponseStartedEvent(),)))
        upstream.on_next(_calling("c1", "b"))
        upstream.on_completed()
        await asyncio.wait_for(done, 5)
        called = [x for r in items for x in r.contents if isinstance(x, c.ToolCalledContent)]
        return [x.error for x in called]

    errors = asyncio.run(main())
    assert _RUNS == ["a", "b"], errors


# ------------------------------------------------------------------ UpdateDecoder: _no_events


def test_a_json_error_after_many_keep_alive_comments_is_the_providers_error() -> None:
    """What the user does: streams through a gateway that sends SSE keep-alive comments
    while it waits for the upstream (OpenRouter's ``: OPENROUTER PROCESSING``, one a
    second or so), then, when the upstream fails, writes the upstream's JSON error into
    the already-started 200 ``text/event-stream`` body. After ~80 seconds of waiting
    the comments are over 2 KB.

    What happens: ``IncompleteStream: the stream ended without [DONE] or a
    finish_reason``, without the error. ``UpdateDecoder._keep_head``
    (rafrx/sources/_decoder.py:150-155) keeps the body's first 2048 bytes *including
    the comments*, and ``_no_events`` drops the comments afterwards: nothing of the
    JSON is left, so it falls back to the bare error.

    What should happen: ``ProviderError: upstream overloaded``, as for the same body
    with a few comments (``test_a_body_of_keep_alive_comments_only_is_just_incomplete``
    and ``_no_events`` treat comments as noise to skip) and as README says: "A body
    that holds no event at all fails as the provider's error when it is a JSON error".
    Comment lines should not count against the 2048 bytes kept.
    """
    from rafrx.sources._decoder import UpdateDecoder

    decoder = UpdateDecoder("openai-chat")
    for _ in range(100):
        assert decoder.feed(b": OPENROUTER PROCESSING\n\n") == []
    decoder.feed(b'{"error": {"message": "upstream overloaded", "type": "server_error"}}')
    with pytest.raises(ProviderError, match="upstream overloaded"):
        decoder.close()


# ------------------------------------------------------------------ strict mode: tuple items


def test_a_strict_tool_with_draft4_tuple_items_is_refused_like_prefix_items() -> None:
    """What the user does: ``Tool(..., schema, fn, strict=True)`` with a schema read from
    an MCP server or zod (draft 4 to 2019-09), where a fixed-length tuple is written
    ``"items": [{"type": "string"}, {"type": "integer"}]``. Today's fix taught the
    argument checker this form (rafrx/_schema_check.py ``_check_array``: "drafts 4 to
    2019-09's tuples (MCP servers, zod)").

    What happens: ``strict_parameters`` passes the list through untouched
    (rafrx/_strict.py ``_strict``: ``out["items"] = _strict(list)`` returns a non-mapping
    as is), so the tool is accepted and OpenAI gets a strict schema with a tuple in it,
    which it refuses (its strict mode takes one schema for ``items``; rafrx's own docs:
    "a fixed-length tuple: OpenAI refuses ``prefixItems`` there"); nothing inside the
    tuple is made strict either (an object in it is left open).

    What should happen: the same ``TypeError`` as for the 2020-12 form
    (``prefixItems``): "strict mode cannot express parameter 'p': strict mode has no
    fixed-length tuples", when the tool is made.
    """
    from rafrx.tools import Tool

    schema = {
        "type": "object",
        "properties": {"p": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}},
        "required": ["p"],
    }
    with pytest.raises(TypeError, match="fixed-length tuples"):
        Tool("pair", "Takes a pair.", schema, lambda p: p, strict=True)
