"""What :class:`~rafrx.testing.LLMServer` records about each request, secrets redacted.

Example:
    >>> req = RecordedRequest.build(
    ...     "/v1/chat/completions",
    ...     {"Authorization": "Bearer sk-secret", "Content-Type": "application/json"},
    ...     {"messages": [{"role": "user", "content": "Hi"}], "tools": []},
    ... )
    >>> req.headers["authorization"], req.wire_format, req.last_role
    ('Bearer ***', 'openai-chat', 'user')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, final

import attrs
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

from rafrx._redaction import is_secret_header, is_secret_param
from rafrx.messages import MCP_APPROVAL_RESPONSE, OPENAI_SERVER_TOOL_ITEMS
from rafrx.recorder import SECRET_HEADERS
from rafrx.testing._render import WIRE_FORMATS, WireFormat

__all__ = ["REDACTED", "SECRET_HEADERS", "RecordedRequest", "redact_headers"]

#: What replaces a secret.
REDACTED = "***"


def _redact_query(query: Mapping[str, str] | Iterable[tuple[str, str]]) -> MultiDictProxy[str]:
    items = query.items() if isinstance(query, Mapping) else query
    out: MultiDict[str] = MultiDict()
    for name, value in items:
        out.add(name, REDACTED if is_secret_param(name) else value)
    return MultiDictProxy(out)


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> CIMultiDictProxy[str]:
    """A read-only, case-insensitive copy of ``headers`` with secrets replaced.

    ``Authorization`` keeps its scheme (``Bearer ***``).

    Example:
        >>> dict(redact_headers({"X-Api-Key": "sk-ant-1", "Accept": "*/*"}))
        {'X-Api-Key': '***', 'Accept': '*/*'}
    """
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in items:
        lower = name.lower()
        if is_secret_header(name):
            scheme, sep, _ = value.partition(" ")
            keep_scheme = sep and lower.endswith("authorization")
            value = f"{scheme} {REDACTED}" if keep_scheme else REDACTED
        out.add(name, value)
    return CIMultiDictProxy(out)


#: The Responses input items without a ``role`` that answer the model: its tools' results,
#: and the approver's answer to a remote MCP tool's approval request.
_TOOL_SIDE_ITEMS: Final = frozenset(
    {"function_call_output", "custom_tool_call_output", MCP_APPROVAL_RESPONSE}
)
#: Those the model made: its calls, its reasoning, its provider-run tools' items (whole,
#: or as an ``item_reference`` to one).
_MODEL_SIDE_ITEMS: Final = frozenset(
    {"function_call", "custom_tool_call", "reasoning", "item_reference"} | OPENAI_SERVER_TOOL_ITEMS
)


def _ends(kind: Any, suffix: str) -> bool:
    """Whether an item's ``type`` is a string ending with ``suffix``."""
    return isinstance(kind, str) and kind.endswith(suffix)


def _last_role(wire_format: WireFormat | None, body: Mapping[str, Any]) -> str | None:
    items = body.get("input") if wire_format == "openai-responses" else body.get("messages")
    if isinstance(items, str):
        return "user"
    if not isinstance(items, list) or not items:
        return None
    last = items[-1]
    if not isinstance(last, Mapping):
        return None
    kind = last.get("type")
    if kind in _TOOL_SIDE_ITEMS or _ends(kind, "_call_output"):  # (computer_call_output …)
        return "tool"
    if kind in _MODEL_SIDE_ITEMS or _ends(kind, "_call"):  # (computer_call, shell_call …)
        return "assistant"
    role = last.get("role")
    if role == "function":  # OpenAI's legacy tool result
        return "tool"
    content = last.get("content")
    if (
        role == "user"
        and isinstance(content, list)
        and content
        and all(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)
    ):
        return "tool"
    return role if isinstance(role, str) else None


#: The chat tool types that hold their name in a mapping named after the type.
_CHAT_TOOL_TYPES: Final = ("function", "custom")


@final
@attrs.frozen
class RecordedRequest:
    """One request the server received.

    Attributes:
        path: The URL path (``/v1/messages`` …).
        headers: The request headers, case-insensitive, with ``Authorization``,
            ``x-api-key`` and other secrets replaced by ``***``, as are OpenAI's
            account ids (``OpenAI-Organization``, ``OpenAI-Project``), as a
            recording has them: a test sees that they were sent, not their values.
        json: The parsed JSON body (``None`` when it was not JSON).
        method: The HTTP method.
        query: The URL query parameters (Azure's ``api-version`` …), with
            key-like values (``key``, ``api_key``, ``token`` …) replaced by ``***``.
    """

    path: str
    headers: CIMultiDictProxy[str]
    json: Any
    method: str = "POST"
    query: MultiDictProxy[str] = attrs.field(factory=lambda: MultiDictProxy(MultiDict()))

    @classmethod
    def build(
        cls,
        path: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        json: Any,
        method: str = "POST",
        query: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> RecordedRequest:
        """Record a request, redacting its secret headers and query values.

        Example:
            >>> req = RecordedRequest.build("/v1/chat/completions", {}, None,
            ...                             query={"api-version": "2024-10-21", "key": "s3"})
            >>> dict(req.query)
            {'api-version': '2024-10-21', 'key': '***'}
        """
        return cls(path, redact_headers(headers), json, method, _redact_query(query))

    @property
    def wire_format(self) -> WireFormat | None:
        """``"openai-chat"``, ``"anthropic"`` or ``"openai-responses"``, by path."""
        return WIRE_FORMATS.get(self.path)

    @property
    def body(self) -> Mapping[str, Any]:
        """The JSON body when it is an object, else an empty mapping."""
        return self.json if isinstance(self.json, Mapping) else {}

    @property
    def messages(self) -> list[Any]:
        """The conversation as sent: ``messages``, or the Responses ``input`` items."""
        key = "input" if self.wire_format == "openai-responses" else "messages"
        items = self.body.get(key)
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return list(items) if isinstance(items, list) else []

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the tools offered, in every provider's shape."""
        names: list[str] = []
        for tool in self.body.get("tools") or ():
            if not isinstance(tool, Mapping):
                continue
            kind = tool.get("type")  # chat nests the name under the type: function, custom
            nested = tool.get(kind if kind in _CHAT_TOOL_TYPES else "function")
            name = nested.get("name") if isinstance(nested, Mapping) else tool.get("name")
            if isinstance(name, str):
                names.append(name)
        return tuple(names)

    @property
    def last_role(self) -> str | None:
        """Who spoke last, the same across formats: ``"user"``, ``"assistant"``
        (Responses: also a call, reasoning or provider-run tool item), ``"tool"`` (a
        tool result: OpenAI ``tool`` message or legacy ``function`` message, Anthropic
        ``tool_result`` blocks, Responses ``function_call_output``,
        ``custom_tool_call_output`` and the other ``*_call_output`` items, such as
        ``computer_call_output``; and a Responses ``mcp_approval_response``, the
        answer a remote MCP tool waited for) or ``"system"``."""
        return _last_role(self.wire_format, self.body)

    @property
    def model(self) -> str | None:
        """The requested model."""
        model = self.body.get("model")
        return model if isinstance(model, str) else None
