"""Regression tests of session 10's fixes to the clients, the SSE decoding of a dialect
of one's own, and the agent's reading of a client's errors.

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from rafrx.messages import ChatMessage
from rafrx.sources.clients import LLMClient, ToolLike


class _NoDialect(LLMClient):
    """A client of one's own that forgot its ``dialect``."""

    endpoint = "chat/completions"
    default_model = "m"

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        return {"model": self.model, "messages": [m.to_openai() for m in messages]}


def test_a_client_without_a_dialect_is_refused_when_made() -> None:
    """An ``LLMClient`` subclass without ``dialect`` was made without complaint and
    failed only at ``stream()``, with ``AttributeError: '_NoDialect' object has no
    attribute 'dialect'``, which says neither that the class must set it nor what
    to set. ``dialect`` is declared a ``ClassVar`` of ``LLMClient``: making such a
    client is a TypeError naming the class and the attribute to set."""
    with pytest.raises(TypeError, match=r"_NoDialect.*dialect.*openai-chat"):
        _NoDialect("http://127.0.0.1:1")


class _Intermediate(LLMClient):
    """An abstract base of one's own: its subclasses set the dialect."""

    endpoint = "chat/completions"
    default_model = "m"


class _Concrete(_Intermediate):
    dialect = "openai-chat"

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        return {"model": self.model}


class _ByProperty(_Concrete):
    @property
    def dialect(self) -> str:  # type: ignore[override]
        return "anthropic"


def test_a_dialect_set_by_a_subclass_or_a_property_is_accepted() -> None:
    assert _Concrete("http://127.0.0.1:1").dialect == "openai-chat"
    assert _ByProperty("http://127.0.0.1:1").dialect == "anthropic"
