"""The 3 :data:`Event` variants: step boundaries and approval requests.

Example:
    >>> from rafrx.response import FinishReason
    >>> match FinishEvent(FinishReason.STOP):
    ...     case FinishEvent(reason):
    ...         print(reason)
    stop
"""

from __future__ import annotations

from typing import Any, final

import attrs

from rafrx.response import FinishReason, Usage

__all__ = ["Event", "FinishEvent", "ResponseStartedEvent", "ToolApprovalRequestEvent"]


@final
@attrs.frozen
class ResponseStartedEvent:
    """An LLM call began (one per call: the step boundary of an agent turn)."""

    id: str | None = None
    model: str | None = None


@final
@attrs.frozen
class ToolApprovalRequestEvent:
    """A tool call waits for approval; answer through the agent's approver."""

    call_id: str
    name: str
    arguments: Any
    description: str = ""


@final
@attrs.frozen
class FinishEvent:
    """An LLM call finished, with its reason and (when known) its usage."""

    finish_reason: FinishReason
    usage: Usage | None = None


Event = ResponseStartedEvent | ToolApprovalRequestEvent | FinishEvent
"""Any of the 3 event variants."""
