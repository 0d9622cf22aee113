"""A review of salvage(), reset_tool_choice and the docstring fix found these: each
test failed before its fix. Salvaged updates reach no subscriber that stopped, and a
call ended by ``aclose()`` keeps its usage as a dropped one does; chat never salvages
a thinking block cut before its signature; Mistral's ``tool_choice="any"`` is reset;
a docstring's form feed no longer breaks its ``Args:``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rafrx import updates as u
from rafrx.sources import UpdateDecoder, from_sse


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


ANTHROPIC_START = _event(
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-sonnet-4-5",
            "usage": {"input_tokens": 10, "output_tokens": 1},
        },
    },
)
ANTHROPIC_ERROR = _event(
    "error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
)


def test_sync_drive_salvages_nothing_after_the_subscriber_stopped() -> None:
    """What: ``from_sse`` over bytes, one chunk holding ``message_start`` and an
    ``error`` event; the subscriber stops (disposes) at the first update, the
    ``ResponseMetadata`` (as ``take(1)`` does).

    Why wrong: ``SyncSource.drive``'s contract is "once ``stopped()`` is true, stop
    reading soon and call neither" (rafrx/operators/_reducer.py). The decoder kept
    the error (``done``), so ``_SyncBody.drive`` breaks out without checking
    ``stopped()``, ``decoder.close()`` raises, and the new ``_after_salvage`` delivers
    a ``Usage`` to ``on_next`` after the subscriber stopped (then ``on_error``).

    Where: rafrx/sources/_from_sse.py ``_SyncBody.drive`` (the ``if decoder.done:
    break`` before the ``stopped()`` check, and the ``except`` calling
    ``_after_salvage`` with no ``stopped()`` check).
    """
    source = from_sse(ANTHROPIC_START + ANTHROPIC_ERROR, "anthropic")
    seen: list[Any] = []
    stopped = False

    def on_next(update: Any) -> None:
        nonlocal stopped
        seen.append(update)
        stopped = True  # take(1): it has its item

    source.drive(on_next, lambda e: seen.append(("error", e)), lambda: None, lambda: stopped)
    assert [type(x).__name__ for x in seen] == ["ResponseMetadata"], seen


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "claude-via-litellm",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n".encode()


def test_chat_salvage_gives_no_litellm_thinking_block_cut_before_its_signature() -> None:
    """What: a LiteLLM proxy streams Claude's thinking as ``delta.thinking_blocks``
    pieces; the connection drops mid-thinking, before the piece with the
    ``signature``. ``UpdateDecoder.salvage()`` then gives the held block anyway, as a
    ``THINKING_BLOCKS`` provider_data with no signature.

    Why wrong: the block is not whole. Anthropic's own dialect salvages a thinking
    block only once signed (anthropic.py ``salvage``: ``block.signature``), because
    an unsigned (or cut) thinking block sent back is refused by the API
    ("thinking.signature: Field required"); ``to_openai`` sends
    ``thinking_blocks`` as they came, so a partial kept in a conversation would
    break the next request through LiteLLM. Only signed blocks should be salvaged
    (as the Anthropic dialect does), and OpenRouter's ``reasoning.text`` details
    likewise.

    Where: rafrx/sources/dialects/openai_chat.py ``OpenAIChatDialect.salvage`` →
    ``_held_reasoning`` (``self._thinking.merged()`` with no signed check).
    """
    decoder = UpdateDecoder("openai-chat")
    got: list[Any] = []
    got += decoder.feed(_chunk({"role": "assistant", "content": ""}))
    piece = {"type": "thinking", "thinking": "Let me think about"}
    got += decoder.feed(
        _chunk({"reasoning_content": "Let me think about", "thinking_blocks": [piece]})
    )
    got += decoder.salvage()  # the connection dropped here
    blocks = [
        b
        for x in got
        if isinstance(x, u.ReasoningDelta) and x.provider_data
        for b in x.provider_data.get("blocks", ())
    ]
    assert all(b.get("signature") for b in blocks), blocks


def test_unforced_resets_mistrals_any() -> None:
    """What: ``Agent(reset_tool_choice=True)`` (the default) on Mistral's chat API
    (an ``OpenAIChatClient`` server the docstring names), with
    ``tool_choice="any"``: Mistral's value that forces a tool call.

    Why wrong: ``_unforced("any")`` is ``None`` (only Mappings are looked at besides
    ``"required"``), so the forcing choice is sent again after every tool round and
    the model can never answer: the turn runs to ``max_steps``, the very loop
    ``reset_tool_choice`` exists to end. Anthropic's ``any`` is handled only in its
    dict form.

    Where: rafrx/agent.py ``_unforced`` (``if choice == "required"``); fix:
    ``if choice in ("required", "any")``.
    """
    from rafrx.agent import _unforced

    assert _unforced("any") == "auto"


def _thinking_start(index: int) -> bytes:
    return _event(
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
    )


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return _event(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


@pytest.mark.asyncio
async def test_an_async_body_stopped_on_a_salvaged_update_reports_nothing_to_the_loop() -> None:
    """What: ``from_sse`` over an async iterable of an Anthropic stream whose
    connection drops after a signed thinking block (no ``content_block_stop``);
    the subscriber takes updates up to the salvaged thinking block and disposes
    there (``take(n)``).

    Why wrong: ``_after_salvage`` delivers the salvaged updates with no check of
    ``disposed`` (``emit`` has one), then ``fail`` sees ``disposed`` and hands the
    *stream's* error to the loop's exception handler as "rafrx.from_sse: error after
    disposal", a branch meant for a subscriber that raised: a subscriber that just
    stopped at its n-th item gets an error logged as unhandled.

    Where: rafrx/sources/_from_sse.py ``_from_async.read`` (``fail(_after_salvage(
    decoder, observer.on_next, err))``); fix: salvage through ``emit`` (stops when
    disposed) and report nothing when disposed without a subscriber error.
    """
    from reactivex import operators as rxops

    async def body():  # type: ignore[no-untyped-def]
        yield ANTHROPIC_START
        yield _thinking_start(0)
        yield _delta(0, {"type": "thinking_delta", "thinking": "hmm"})
        yield _delta(0, {"type": "signature_delta", "signature": "sig"})
        raise ConnectionResetError("dropped")

    loop = asyncio.get_running_loop()
    handled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: handled.append(context))
    got: list[Any] = []
    done = asyncio.Event()
    # metadata, ReasoningDelta("hmm"), then the salvaged signed block: take 3
    from_sse(body(), "anthropic").pipe(rxops.take(3)).subscribe(
        got.append, lambda e: done.set(), done.set
    )
    await asyncio.wait_for(done.wait(), 2)
    for _ in range(5):
        await asyncio.sleep(0)
    assert isinstance(got[-1], u.ReasoningDelta), got
    assert got[-1].provider_data, got
    assert handled == [], handled


ANTHROPIC_TEXT = _event(
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
) + _delta(0, {"type": "text_delta", "text": "Hello"})


@pytest.mark.asyncio
async def test_a_call_ended_by_aclose_keeps_the_usage_already_reported() -> None:
    """What: an Anthropic call has sent ``message_start`` (input tokens) and some text,
    then the server goes quiet; the user closes the client (``aclose()``), which ends
    the running call with a ``TransportError`` ("client closed ...").

    Why wrong: the call failed with an error, after the provider reported usage that
    only the ``Finish`` would have carried, exactly the case ``salvage()`` was added
    for; yet ``_StreamCall.abort`` ends it with ``_end(TransportError(...))`` without
    ``_salvaged``, so ``err.partial.usage`` is ``None`` here while the same call cut
    by a dropped connection or a read timeout keeps its usage. Same for the
    "cancelled (its event loop ended?)" error of ``_run``'s ``CancelledError`` branch.

    Where: rafrx/sources/_http.py ``_StreamCall.abort`` (and ``_run``'s
    ``except asyncio.CancelledError``); fix: ``self._end(self._salvaged(TransportError(...)))``.
    """
    from rafrx import ChatMessage
    from rafrx.errors import RafrxError
    from rafrx.sources.clients import AnthropicClient
    from rafrx.testing import Fault, LLMServer, Replay

    body = ANTHROPIC_START + ANTHROPIC_TEXT
    async with LLMServer() as server:
        server.enqueue(Fault.stall(30, after_bytes=len(body), body=Replay(body + ANTHROPIC_ERROR)))
        client = AnthropicClient(server.url, "sk-test-0123456789abcdef")
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        seen: list[Any] = []

        def on_next(update: Any) -> None:
            seen.append(update)

        client.stream([ChatMessage.user("hi")]).subscribe(on_next, done.set_result)
        for _ in range(200):
            if any(isinstance(x, u.TextDelta) for x in seen):
                break
            await asyncio.sleep(0.01)
        await client.aclose()
        error = await asyncio.wait_for(done, 5)
    assert isinstance(error, RafrxError), error
    assert any(isinstance(x, u.Usage) for x in seen), seen


def test_a_docstring_with_a_form_feed_keeps_its_args() -> None:
    """What: a tool's Google-style docstring with a form feed (``\\x0c``) inside an
    argument's description.

    Why wrong: to normalise Windows line ends, ``parse_docstring`` now runs
    ``"\\n".join(doc.splitlines())`` before ``inspect.cleandoc``; ``str.splitlines``
    also splits at ``\\x0c``, ``\\x0b``, ``\\x1c``-``\\x1e``, ``\\x85``,
    ``\\u2028``/``\\u2029``. The
    text after the form feed becomes a line of its own with no indent, so
    ``cleandoc`` finds a margin of 0 and dedents nothing: the ``Args:`` section is no
    longer recognised, lands in the tool's description, and every parameter loses
    its description. Before this change (27fd025) the same docstring gave
    ``{"text": "The note page.", "urgent": "Whether it is urgent."}``.

    Where: rafrx/_docstrings.py ``parse_docstring``; fix:
    ``doc.replace("\\r\\n", "\\n").replace("\\r", "\\n")`` instead of splitlines/join.
    """
    from rafrx._docstrings import parse_docstring

    doc = """Send a note.

    Args:
        text: The note\x0c page.
        urgent: Whether it is urgent.
    """
    description, params = parse_docstring(doc)
    assert description == "Send a note."
    assert params == {"text": "The note page.", "urgent": "Whether it is urgent."}
