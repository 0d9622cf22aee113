"""Regression tests of the bugs a "team testing its agent with rafrx.testing" hunt found
(the passing pins are in ``test_testing_kit_hunt.py``).

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

from rafrx.testing import RecordedRequest

_CHAT = "/v1/chat/completions"


def test_a_legacy_function_result_is_a_tool_result_for_last_role() -> None:
    """A chat request ending with OpenAI's legacy ``function`` message had ``last_role ==
    "function"``, though the doc promises the same roles across formats (``"tool"`` for a
    tool result). rafrx itself sends that shape (``ChatMessage("tool", ..., name=...)``
    without a call id), so a script checking ``last_role == "tool"`` called tools forever."""
    body = {"messages": [{"role": "function", "name": "now", "content": "12:00"}]}
    assert RecordedRequest.build(_CHAT, {}, body).last_role == "tool"


def test_tool_names_include_a_chat_custom_tool() -> None:
    """``tool_names`` ("in every provider's shape") left out a Chat Completions custom
    tool, ``{"type": "custom", "custom": {"name": ...}}``, which rafrx's chat client
    sends as given: an assertion that the agent offered its free-form tool failed."""
    tools = [
        {"type": "function", "function": {"name": "search", "parameters": {}}},
        {"type": "custom", "custom": {"name": "shell", "description": "Run a command"}},
    ]
    request = RecordedRequest.build(_CHAT, {}, {"messages": [], "tools": tools})
    assert request.tool_names == ("search", "shell")
