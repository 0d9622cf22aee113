"""Regression tests for the bugs a close, line-by-line reading of rafrx's wire
conversions found (reading a history back in: ``from_openai``, ``from_anthropic``).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

from rafrx.messages import ChatMessage, from_anthropic
from rafrx.sources.clients import OpenAIChatClient


def test_from_openai_reads_the_reasoning_field_the_client_sends_and_the_stream_reads() -> None:
    """What the user does: keeps an Ollama / vLLM / OpenRouter history as chat dicts.
    Either rafrx wrote them (``OpenAIChatClient(reasoning_field="reasoning")``) or the
    server returned them, with the assistant's reasoning in ``"reasoning"``. The user
    reads them back with ``ChatMessage.from_openai``.

    What happens: ``from_openai`` reads only ``reasoning_content`` (messages.py:426),
    so ``reasoning`` comes back as None and the next request drops the reasoning the
    model produced.

    What should happen: ``from_openai`` should read ``reasoning`` when
    ``reasoning_content`` is missing, the same way the stream decoder does
    (rafrx/sources/dialects/openai_chat.py:495:
    ``delta.get("reasoning_content") or delta.get("reasoning")``). The README
    (line ~148) names ``reasoning`` as Ollama's field for a past turn's reasoning.
    """
    client = OpenAIChatClient("http://127.0.0.1:1", model="m", reasoning_field="reasoning")
    sent = client._payload([ChatMessage("assistant", "Hi.", reasoning="Greet.")], [])
    wire = sent["messages"][0]
    assert wire["reasoning"] == "Greet."
    assert ChatMessage.from_openai(wire).reasoning == "Greet."


def test_from_anthropic_does_not_glue_a_users_separate_text_blocks_together() -> None:
    """What the user does: imports an Anthropic conversation whose user turn has two
    text blocks (common: an attachment block and the question, or Claude Code's
    reminder block and the prompt).

    What happens: ``from_anthropic`` joins the texts with ``""`` (messages.py:1166),
    so "Here is the file:" and "def f(): pass" become "Here is the file:def f(): pass".
    The words run together and the message's meaning changes.

    What should happen: the blocks should be kept apart, for example with the
    blank line that ``from_anthropic`` already puts between the same text blocks in
    ``system`` (messages.py:1145, "a blank line apart (as to_anthropic joins them)").
    The assistant's blocks have to stay joined with ``""`` because TEXT_REF counts
    characters, but no such ref exists for a user message.
    """
    msgs = from_anthropic(
        None,
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Here is the file:"},
                    {"type": "text", "text": "def f(): pass"},
                ],
            }
        ],
    )
    assert "file:def" not in msgs[0].content
