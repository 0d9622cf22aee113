"""HTML fragments for rafrx values: they back the ``_repr_html_`` of the model classes.

Everything model-made is escaped: a ``<script>`` in a reply stays text.

Example:
    >>> from rafrx.content import TextContent
    >>> content_html(TextContent("<b>hi</b>"))
    '<span class="rafrx-text">&lt;b&gt;hi&lt;/b&gt;</span>'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rafrx import content as c
from rafrx.events import ToolApprovalRequestEvent
from rafrx.messages import MCP_APPROVAL_RESPONSE, MessageRole
from rafrx.notebook._format import clip_html, escape, json_html
from rafrx.notebook._order import message_parts

if TYPE_CHECKING:
    from rafrx.messages import ChatMessage, ToolCall
    from rafrx.response import AgentResponse, AgentResponseResult

__all__ = ["content_html", "message_html", "response_html", "result_html"]


def content_html(item: c.Content) -> str:
    """One content item as an HTML fragment."""
    match item:
        case c.TextContent(text):
            return f'<span class="rafrx-text">{escape(text)}</span>'
        case c.ReasoningContent(text):
            return f'<span class="rafrx-reasoning" style="color:#888">{escape(text)}</span>'
        case c.UriContent(uri, media_type):
            kind = f" ({escape(media_type)})" if media_type else ""
            return f'<span class="rafrx-uri">🔗 <code>{escape(uri)}</code>{kind}</span>'
        case c.ToolCallStartContent(call_id, name):
            return f"<div>▶ tool call <b>{escape(name)}</b> <code>{escape(call_id)}</code></div>"
        case c.ToolCallArgsContent(call_id, delta):
            return f"<code>{clip_html(delta)}</code>"
        case c.ToolCallArgsParsedContent(call_id, name, value):
            return f"<div>✓ <b>{escape(name)}</b> = <code>{json_html(value)}</code></div>"
        case c.ToolCallArgsProgressContent(call_id, name, received, value):
            return f"<div>… <b>{escape(name)}</b> {_number(received)} bytes</div>"
        case c.ToolCallEndContent(call_id):
            return f"<div>■ arguments complete <code>{escape(call_id)}</code></div>"
        case c.ToolCallingContent(call_id, name, arguments, raw, error):
            shown = json_html(arguments) if error is None else clip_html(raw)
            problem = f' <span style="color:#c00">{escape(error)}</span>' if error else ""
            return (
                f'<div class="rafrx-tool"><b>{escape(name)}</b>'
                f"(<code>{shown}</code>){problem}</div>"
            )
        case c.ToolCallIncompleteContent(call_id, name, raw):
            return (
                f'<div class="rafrx-tool">✂ <b>{escape(name)}</b>(<code>{clip_html(raw)}</code>) '
                f'<span style="color:#c00">{escape(item.error)}</span></div>'
            )
        case c.ToolCalledContent(call_id, result, error):
            if error is not None:
                return f'<div style="color:#c00">✗ {clip_html(error)}</div>'
            return f"<div>→ <code>{clip_html(result or '')}</code></div>"
        case c.UsageContent(usage):
            return (
                f"<div>usage: {_number(usage.prompt_tokens)} in, "
                f"{_number(usage.completion_tokens)} out, {_number(usage.total_tokens)} total</div>"
            )
        case c.ErrorContent(message):
            return f'<div style="color:#c00">error: {escape(message)}</div>'
    return escape(repr(item))


def result_html(result: AgentResponseResult) -> str:
    """One result chunk as HTML."""
    parts = [content_html(item) for item in result.contents]
    parts.extend(f"<div><i>{_event_html(event)}</i></div>" for event in result.events)
    return f'<div class="rafrx-result">{"".join(parts)}</div>'


def _event_html(event: object) -> str:
    if isinstance(event, ToolApprovalRequestEvent):  # its arguments may be large
        arguments = json_html(event.arguments)
        return f"approval asked: <b>{escape(event.name)}</b>(<code>{arguments}</code>)"
    return clip_html(repr(event))


def _number(value: object) -> str:
    """A count as HTML (escaped: a recording shared by someone else may hold anything)."""
    return escape(str(value))


def message_html(message: ChatMessage) -> str:
    """A chat message as HTML: its reasoning, text and tool calls in the order they
    streamed, as the live view showed them (see :func:`~rafrx.notebook._order.message_parts`)."""
    style = "white-space:pre-wrap" + (";color:#c00" if message.is_error else "")
    tool_result = message.role is MessageRole.TOOL  # (a preview, as in the live view)
    shown = []
    for kind, value in message_parts(message):
        if kind == "text":
            text = clip_html(value) if tool_result else escape(value)
            shown.append(f'<span class="rafrx-text" style="{style}">{text}</span>')
        elif kind == "reasoning":
            shown.append(f'<div class="rafrx-reasoning" style="color:#888">{escape(value)}</div>')
        elif kind == "call":
            shown.append(_call_html(value))
        else:
            shown.append(_approval_html(value))
    return f'<div class="rafrx-message"><b>{escape(message.role.value)}</b>: {"".join(shown)}</div>'


def _call_html(call: ToolCall) -> str:
    return (
        f'<div class="rafrx-call">🔧 <b>{escape(call.name)}</b>'
        f"(<code>{json_html(call.arguments)}</code>) <code>{escape(call.id)}</code></div>"
    )


def _approval_html(block: dict[str, Any]) -> str:
    """A provider's own tool asking approval (a Responses ``mcp_approval_request``
    item), or the answer to it; any other block: nothing.

    Example:
        >>> _approval_html({"type": "mcp_approval_response", "approve": False, "reason": "no"})
        '<div style="color:#c00">✘ denied: no</div>'
    """
    kind = block.get("type")
    if kind == "mcp_approval_request":
        name = f"{block.get('server_label', '')}.{block.get('name', '')}"
        return (
            f"<div>🔒 approval asked: <b>{escape(name)}</b>"
            f"(<code>{clip_html(str(block.get('arguments', '')))}</code>) "
            f"<code>{escape(str(block.get('id', '')))}</code></div>"
        )
    if kind == MCP_APPROVAL_RESPONSE:
        if block.get("approve") is True:
            return '<div style="color:#2a2">✔ approved</div>'
        return f'<div style="color:#c00">✘ denied: {clip_html(str(block.get("reason", "")))}</div>'
    return ""


def response_html(response: AgentResponse) -> str:
    """An :class:`~rafrx.AgentResponse` as HTML: transcript, finish and usage."""
    rows = "".join(message_html(m) for m in response.turn_transcript)
    rows += "".join(  # calls cut short: never run, so not in the transcript
        f'<div class="rafrx-call" style="color:#c00">✂ <b>{escape(call.name)}</b> '
        f"<code>{escape(call.id)}</code> {escape(call.error or '')}</div>"
        for call in response.tool_calls
        if not call.complete
    )
    usage = response.usage
    footer = f"finish: {escape(str(response.finish_reason))}"
    if usage is not None:
        footer += f" · tokens {_number(usage.prompt_tokens)} in / "
        footer += f"{_number(usage.completion_tokens)} out"
    if response.interrupted:
        footer += ' · <span style="color:#c00">interrupted</span>'
    model = escape(response.model or "")
    return f'<div class="rafrx-response"><small>{model}</small>{rows}<small>{footer}</small></div>'
