"""aiohttp clients: OpenAI chat completions, Anthropic Messages, OpenAI Responses.

Each client's :meth:`~OpenAIChatClient.stream` returns a *cold*
``Observable[AgentResponseUpdate]``: every subscription sends one request (on
the running event loop) and disposing it closes the connection. Errors are
typed (:mod:`rafrx.errors`, see :mod:`rafrx.sources._http`); the API key never
appears in a repr, an error or a log (a key shorter than 8 characters, a local
server's ``"ollama"``, is masked where it stands as a whole word, not inside
other words).

``base_url`` is what the provider's SDK takes: the server's root
(``https://api.openai.com``, the endpoint's ``/v1/...`` is added) or an API
prefix ending in a path (``https://openrouter.ai/api/v1``,
``http://localhost:11434/v1``: only ``chat/completions`` or ``responses`` is
added). For Anthropic, as in its SDK, ``/v1/messages`` is added to a path
that does not end in ``/v1`` (``https://api.deepseek.com/anthropic``).

Example:
    >>> import asyncio
    >>> import rafrx
    >>> from rafrx.testing import LLMServer, Reply, ToolCallSpec
    >>> async def main() -> rafrx.AgentResponse:
    ...     async with LLMServer() as server, AnthropicClient(server.url, "sk-ant-x") as client:
    ...         server.enqueue(Reply(text="Sunny.", tool_calls=[ToolCallSpec("log", {"n": 1})]))
    ...         updates = client.stream([rafrx.ChatMessage.user("Weather?")])
    ...         return await rafrx.collect_agent_response(updates.pipe(rafrx.convert()))
    >>> response = asyncio.run(main())
    >>> response.text, response.tool_calls[0].name, response.tool_calls[0].arguments
    ('Sunny.', 'log', {'n': 1})
"""

from __future__ import annotations

import abc
import copy
import functools
import importlib.metadata
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Final, Protocol, TypeAlias, runtime_checkable

import aiohttp
from reactivex import Observable
from yarl import URL

from rafrx._redaction import header_secrets, secret_forms, url_secrets
from rafrx.messages import (
    CUSTOM_TOOL_CALL_REF,
    FUNCTION_CALL_REF,
    MCP_APPROVAL_RESPONSE,
    MESSAGE_REF,
    OPENAI_REASONING,
    OPENAI_SERVER_TOOL_ITEMS,
    ChatMessage,
    MessageRole,
    ToolCall,
    _block_type,
    _responses_id,
    _unique_call_ids,
    checked_messages,
    custom_input,
    pending_container,
    to_anthropic,
    to_openai_chat,
)
from rafrx.operators._inputs import a_noun
from rafrx.sources._http import HTTPRequest, stream_updates
from rafrx.sources._policy import RetryPolicy, Timeouts
from rafrx.sources._secrets import masked_url
from rafrx.sources._sessions import SessionPool, has_authorization
from rafrx.sources.dialects import DIALECTS, check_dialect_name
from rafrx.sse import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES
from rafrx.tools import Tool
from rafrx.updates import AgentResponseUpdate

__all__ = [
    "AnthropicClient",
    "LLMClient",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "RetryPolicy",
    "Timeouts",
    "ToolDefinition",
    "ToolLike",
    "to_responses_input",
    "tool_schema",
]

_log = logging.getLogger(__name__)


@runtime_checkable
class ToolDefinition(Protocol):
    """Anything with a ``name``, a ``description`` and JSON-schema ``parameters``."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


ToolLike: TypeAlias = ToolDefinition | Mapping[str, Any]
"""A tool definition: an object with ``name``/``description``/``parameters``, or a
mapping with those keys (an OpenAI ``{"type": "function", "function": {...}}``
or Anthropic ``input_schema`` mapping works too)."""

_EMPTY_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}


def _checked_tools(tools: Any) -> list[ToolLike]:
    """``tools`` as a list of tool definitions, or a ``TypeError`` saying what is wrong."""
    if tools is None:
        return []
    if isinstance(tools, Mapping) or not isinstance(tools, Iterable):  # (a bare Tool is none)
        raise TypeError(
            f"a client's tools are a list (tools=[...]), not one {type(tools).__name__}"
        )
    offered = list(tools)
    for i, tool in enumerate(offered):
        if not (isinstance(tool, Mapping) or all(hasattr(tool, a) for a in _DEFINED)):
            raise TypeError(
                f"a client's tools are Tools (rafrx.tool(fn) makes one) or mappings; "
                f"tool {i} is a {type(tool).__name__}"
            )
    return offered


_DEFINED: Final = ("name", "description", "parameters")


def tool_schema(tool: ToolLike) -> tuple[str, str, dict[str, Any]]:
    """A tool's ``(name, description, parameters)``, whatever its shape.

    The parameters are an object schema: none (``{}``, ``None``: an MCP
    server's tool without arguments) is one without properties, and one that
    does not say its type says ``"object"`` (Anthropic refuses it otherwise).

    Example:
        >>> tool_schema({"type": "function", "function": {"name": "now", "parameters": {}}})
        ('now', '', {'type': 'object', 'properties': {}})
    """
    if isinstance(tool, Mapping):
        inner = tool.get("function")
        spec: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
        name, description = str(spec["name"]), str(spec.get("description") or "")
        params = spec.get("parameters", spec.get("input_schema"))
    else:
        name, description, params = tool.name, tool.description or "", tool.parameters
    schema = dict(params or _EMPTY_SCHEMA)
    schema.setdefault("type", "object")
    return name, description, schema


def _strict(tool: ToolLike) -> bool | None:
    """The ``strict`` flag of a tool given in a provider's own shape, if it has one.

    Example:
        >>> _strict({"type": "function", "function": {"name": "now", "strict": True}})
        True
    """
    if not isinstance(tool, Mapping):
        return None
    inner = tool.get("function")
    spec: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
    strict = spec.get("strict")
    return strict if isinstance(strict, bool) else None


def to_responses_input(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as OpenAI Responses ``input`` items.

    Tool calls become ``function_call`` items, tool results
    ``function_call_output`` items; the rest are role messages. The reasoning
    items an assistant message kept (``provider_data[OPENAI_REASONING]``) go
    back before it, as the Responses API asks in a tool loop, each once; with
    the output items that followed them (their ids kept as ``FUNCTION_CALL_REF``
    / ``MESSAGE_REF`` blocks beside them) in their order and with their ids, as
    the API pairs a reasoning item with the item after it. A custom tool's
    call (marked by a ``CUSTOM_TOOL_CALL_REF`` block) and its result go back as
    ``custom_tool_call`` and ``custom_tool_call_output`` items. A call id
    longer than the API takes (64 characters) goes as a short stand-in made
    from it, in the call and in its output alike.

    Example:
        >>> from rafrx.messages import ToolCall
        >>> to_responses_input([
        ...     ChatMessage.assistant_with_tools("", [ToolCall("c1", "now", {})]),
        ...     ChatMessage.tool("12:00", "c1"),
        ... ])  # doctest: +NORMALIZE_WHITESPACE
        [{'type': 'function_call', 'call_id': 'c1', 'name': 'now', 'arguments': '{}'},
         {'type': 'function_call_output', 'call_id': 'c1', 'output': '12:00'}]
    """
    items: list[dict[str, Any]] = []
    sent: set[Any] = set()  # reasoning item ids: the API refuses one sent twice
    conversation = _unique_call_ids(messages, _responses_id)
    custom = {  # the custom tools' call ids
        block.get("call_id")
        for msg in conversation
        if msg.provider_data
        for block in msg.provider_data.get(OPENAI_REASONING, ())
        if _block_type(block) == CUSTOM_TOOL_CALL_REF
    }
    for msg in conversation:
        if msg.role is MessageRole.TOOL:
            custom_call = msg.tool_call_id in custom
            kind = "custom_tool_call_output" if custom_call else "function_call_output"
            items.append({"type": kind, "call_id": msg.tool_call_id, "output": msg.content})
            continue
        kept = msg.provider_data.get(OPENAI_REASONING, ()) if msg.provider_data else ()
        kept = [block for block in kept if not (_is_reasoning(block) and _seen(block, sent))]
        if any(_is_ref(b) for b in kept):
            if any(_is_reasoning(block) for block in kept):
                items += _output_items(msg, kept, custom)  # each reasoning item and the one after
            else:  # (in their places among the server items, but nothing to pair: no ids)
                items += map(_without_id, _output_items(msg, kept, custom))
            continue
        # (the caller's to change:)
        blocks = [copy.deepcopy(block) for block in kept if not _is_ref(block)]
        items += blocks
        # An empty message says nothing, but a reasoning item must have an item after it.
        if msg.content or not (msg.tool_calls or (blocks and not _is_reasoning(blocks[-1]))):
            items.append({"role": msg.role.value, "content": msg.content})
        items.extend(_call_item(call, call.id in custom) for call in msg.tool_calls or ())
    return items


_OUR_ITEMS = ("message", "function_call", "custom_tool_call")  # the output items with a ref


def _without_id(item: Mapping[str, Any]) -> dict[str, Any]:
    """An output item of ours without its id: a message one as the text it said (a
    refusal too: an input message cannot say it refused), a call without its ``fc_``
    id; a server item (with its id) as it is."""
    if item.get("type") == "message":
        parts = item.get("content") or ()
        text = "".join(
            str(p.get("text") or p.get("refusal") or "") for p in parts if isinstance(p, Mapping)
        )
        return {"role": item.get("role", "assistant"), "content": text}
    if item.get("type") in _OUR_ITEMS:
        return {key: value for key, value in item.items() if key != "id"}
    return dict(item)


def _seen(item: Mapping[str, Any], sent: set[Any]) -> bool:
    """Whether a reasoning item with ``item``'s id was already sent (record it if not)."""
    item_id = item.get("id")
    if not isinstance(item_id, str):
        return False
    if item_id in sent:
        return True
    sent.add(item_id)
    return False


def _resolvable(items: Iterable[Any]) -> Iterator[Any]:
    """The input items without the reasoning items a ``store: false`` request cannot
    resolve (no ``encrypted_content``); the items paired with one go without their ids
    (the API refuses an ``fc_`` item whose reasoning item is missing)."""
    unpaired = False
    dropped: set[Any] = set()  # the ids of the server items left out
    for item in items:
        if not isinstance(item, Mapping):
            yield item
        elif item.get("type") == "reasoning":
            unpaired = not item.get("encrypted_content")
            if not unpaired:
                yield item
        elif unpaired and item.get("type") in OPENAI_SERVER_TOOL_ITEMS:
            dropped.add(item.get("id"))  # (its id cannot go, nor can it go without one)
        elif (
            item.get("type") == MCP_APPROVAL_RESPONSE and item.get("approval_request_id") in dropped
        ):
            continue  # (an answer to a request that does not go)
        elif unpaired and item.get("type") in _OUR_ITEMS:
            yield _without_id(item)
        else:
            if item.get("type") in _RESULTS:  # past its output items
                unpaired = False
            yield item


def _by_reference(item: Any) -> Any:
    """A server tool's output item as an ``item_reference`` to it; any other as it is."""
    if _block_type(item) in OPENAI_SERVER_TOOL_ITEMS and isinstance(item.get("id"), str):
        return {"type": "item_reference", "id": item["id"]}
    return item


def _is_reasoning(block: Any) -> bool:
    return _block_type(block) == "reasoning"


_RESULTS = ("function_call_output", "custom_tool_call_output", None)
_CALL_REF_TYPES = (FUNCTION_CALL_REF, CUSTOM_TOOL_CALL_REF)
_REF_TYPES = (*_CALL_REF_TYPES, MESSAGE_REF)


def _is_ref(block: Any) -> bool:
    return _block_type(block) in _REF_TYPES


def _call_item(call: ToolCall, custom: bool, item_id: str | None = None) -> dict[str, Any]:
    """A ``function_call`` item, or a ``custom_tool_call`` one with the ``input`` text."""
    item = {"type": "function_call", "call_id": call.id, "name": call.name}
    if custom:
        item.update(type="custom_tool_call", input=custom_input(call))
    else:
        item["arguments"] = call.arguments_json()
    if item_id is not None:
        item["id"] = item_id
    return item


def _output_items(msg: ChatMessage, kept: Sequence[Any], custom: set[Any]) -> list[dict[str, Any]]:
    """An assistant message as the output items it streamed, in their order and with
    their ids: each reasoning item is followed by the item the API paired it with."""
    items: list[dict[str, Any]] = []
    calls = {call.id: call for call in msg.tool_calls or ()}
    texts = [b for b in kept if _block_type(b) == MESSAGE_REF]
    as_kept = "".join(str(b.get("text") or "") for b in texts) == msg.content
    unsent = msg.content  # (edited since it streamed: all of it goes in the first item)
    for block in kept:
        kind = _block_type(block)
        if kind == MESSAGE_REF:
            if as_kept:  # each message item with its own text
                text = str(block.get("text") or "")
            else:
                text, unsent = unsent, ""
            part = (
                {"type": "refusal", "refusal": text}
                if block.get("refusal") is True
                else {"type": "output_text", "text": text, "annotations": []}
            )
            items.append(
                {
                    "type": "message",
                    "id": block["id"],
                    "role": "assistant",
                    "status": "completed",
                    "content": [part],
                }
            )
        elif kind in _CALL_REF_TYPES:
            call = calls.pop(block.get("call_id"), None)
            if call is not None:
                items.append(_call_item(call, call.id in custom, block.get("id")))
        else:
            items.append(copy.deepcopy(block))
    if msg.content and not texts:  # (no message item: the text came before the calls)
        items.insert(0, {"role": msg.role.value, "content": msg.content})
    items.extend(_call_item(call, call.id in custom) for call in calls.values())  # (renamed)
    return items


@functools.cache
def _user_agent() -> str:
    try:
        return f"rafrx/{importlib.metadata.version('rafrx')}"
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return "rafrx"


class _Secret:
    """Holds an API key; shows as ``***`` everywhere."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "***"

    def __reduce__(self) -> Any:
        raise TypeError("an API key is not picklable")


class LLMClient(abc.ABC):
    """The shared machinery of the three clients (use one of them).

    A client of one's own sets the class attributes ``dialect`` (a name of
    :data:`~rafrx.sources.dialects.DIALECTS`, or a dialect factory), ``endpoint``
    and ``default_model``, and implements ``_payload``; making one whose class
    sets no ``dialect`` raises a ``TypeError`` saying so.

    Args:
        base_url: The server root or API prefix (see the module docs).
        api_key: The API key; ``None`` sends none (local servers). Credentials in
            ``base_url`` (``https://user:password@host``, sent as ``Authorization:
            Basic``) beside a key sent as ``Authorization`` (OpenAI's clients), or
            an ``Authorization`` in ``headers``, are a ``ValueError``: a request
            carries one.
        model: The model name.
        timeouts: Connect, first-byte and idle timeouts.
        retry: Retry failed requests before any output (off by default).
        session: An ``aiohttp.ClientSession`` to use (never closed by the
            client: call :meth:`aclose` before closing it, as aiohttp leaves a
            stream reading from a closed session waiting until the idle
            timeout); by default the client makes one per event loop. It is
            used as it is: one with ``trust_env=True`` adds the API host's
            ``.netrc`` login itself, which aiohttp refuses beside an
            ``Authorization`` header (the API key's, or one in ``headers``):
            each call then fails with a ``TransportError`` saying so, as rafrx
            cannot take the login off a request without changing the session.
            Give one without ``trust_env`` (a proxy as its ``proxy=``), or let
            the client make its own with ``trust_env=True``. The credentials it
            sends with every request are redacted as the API key is: its ``auth=``,
            the values of its default ``headers=`` that are credentials (as
            those of ``headers``), and what it sends its ``proxy=`` (in the
            proxy's URL, or ``proxy_auth=``).
        headers: More request headers; they win over the client's own, the API
            key's header included (a gateway's ``Authorization``).
        max_line_bytes: Longest SSE line accepted (past it: ``LimitExceeded``).
        max_event_bytes: Largest SSE event accepted (past it: ``LimitExceeded``).
        trust_env: Let the client's own session take its proxy (``HTTP_PROXY``,
            ``HTTPS_PROXY``, ``NO_PROXY``) and ``.netrc`` credentials from the
            environment. Off by default, as in aiohttp: a proxy set for the
            internet would otherwise also carry requests to local servers. The
            API host's ``.netrc`` login is sent only without an ``Authorization``
            header (the API key's or one in ``headers`` wins, as in httpx). These
            credentials are redacted as the API key is. A given ``session``
            ignores it: the session's own ``trust_env`` applies.
        **params: More body fields (``temperature``, ``reasoning_effort`` …).
            ``tools`` given here are offered in every call, after the call's own
            (a provider's server tool such as Anthropic's ``web_search_20250305``).
            A transport setting other HTTP clients take as a keyword (``proxy``,
            ``verify``, ``http_client`` …: see :data:`TRANSPORT_SETTINGS`) is a
            ``TypeError`` saying what to use instead: no provider takes it as a
            body field, where it would do nothing but hand the API what it
            holds (a proxy's password).
    """

    dialect: ClassVar[str]
    endpoint: ClassVar[str]
    default_model: ClassVar[str]
    versioned_prefix: ClassVar[bool] = False
    """Whether ``/v1`` is added to a ``base_url`` path that lacks it (Anthropic's SDK
    does; OpenAI's base URLs hold their version)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        *,
        timeouts: Timeouts = Timeouts(),  # noqa: B008 - immutable
        retry: RetryPolicy | None = None,
        session: aiohttp.ClientSession | None = None,
        headers: Mapping[str, str] | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        trust_env: bool = False,
        **params: Any,
    ) -> None:
        _check_dialect(self)
        _check_body_fields(params, f"{type(self).__name__}()")
        _check_string("api_key", api_key)
        _check_string("model", model)
        self.base_url = base_url
        self.max_line_bytes = max_line_bytes
        self.max_event_bytes = max_event_bytes
        self.model = model or self.default_model
        self.timeouts = timeouts
        self.retry = retry
        self.params = dict(params)
        self._api_key = _Secret(api_key) if api_key else None  # ("": none, as openai-python)
        self._extra_headers = dict(headers or {})
        self._sessions = SessionPool(session, trust_env=trust_env)
        self.url = _endpoint(base_url, self.endpoint, versioned_prefix=self.versioned_prefix)
        self._check_one_authorization()

    def _check_one_authorization(self) -> None:
        """Refuse credentials in ``base_url`` (sent as ``Authorization: Basic``) beside
        an ``Authorization`` header of the API key's or of ``headers=``: a request
        carries one, and aiohttp would refuse every request."""
        if self.url.user is None and self.url.password is None:
            return
        from_key = self._auth_headers(self._api_key.value) if self._api_key else {}
        if not has_authorization(_overridden(from_key, self._extra_headers)):
            return
        given = "headers=" if has_authorization(self._extra_headers) else "api_key"
        raise ValueError(
            f"base_url {_shown_url(self.base_url)!r} holds credentials and {given} gives an "
            "Authorization header: a request carries one Authorization, give either"
        )

    def __repr__(self) -> str:
        key = "None" if self._api_key is None else "***"
        return (
            f"{type(self).__name__}(base_url={_shown_url(self.base_url)!r}, "
            f"model={self.model!r}, api_key={key})"
        )

    # ------------------------------------------------------------ to override

    def _auth_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def _protocol_headers(self) -> dict[str, str]:
        return {}

    @abc.abstractmethod
    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        """The request body for ``messages`` and ``tools`` in this provider's format."""

    def _complete(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The body to send, once the client's and the call's fields are in (as is here)."""
        return payload

    # ------------------------------------------------------------ public

    def stream(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolLike] | None = None,
        **params: Any,
    ) -> Observable[AgentResponseUpdate]:
        """The updates of one LLM call, as a cold observable.

        Subscribe from code running in an asyncio loop (or a Jupyter cell):
        each subscription sends the request once; disposing it closes the
        connection. After the provider's terminal marker (``[DONE]``), the
        stream completes once the body ends, or within 0.1 s if it does not
        (the connection is then closed rather than reused).

        Args:
            messages: The conversation.
            tools: The tools offered to the model.
            **params: Body fields for this call only (override the client's).

        Raises:
            TypeError: ``messages`` are not ChatMessages (an OpenAI dict, say:
                ``ChatMessage.from_openai`` reads one), a tool is neither a
                :class:`~rafrx.tools.Tool` nor a mapping, or ``params`` hold a
                transport setting (see :data:`TRANSPORT_SETTINGS`).
            ValueError: The class's ``dialect`` is a name not in
                :data:`~rafrx.sources.dialects.DIALECTS`.
        """
        if isinstance(self.dialect, str):  # (before anything is sent)
            check_dialect_name(self.dialect)
        _check_body_fields(params, f"{type(self).__name__}.stream()")
        conversation = checked_messages(messages, "a client's messages are ChatMessages")
        fields = dict(self.params)
        offered = [*_checked_tools(tools), *(fields.pop("tools", None) or ())]  # (the client's)
        payload = self._payload(list(conversation), offered)
        payload.update(fields)
        payload.update(params)
        payload["stream"] = True
        payload = self._complete(payload)
        headers = {
            "Accept": "text/event-stream",
            "User-Agent": _user_agent(),
            **self._protocol_headers(),
        }
        secrets = (*url_secrets(self.url), *header_secrets(self._extra_headers))
        if self._api_key is not None:
            headers.update(self._auth_headers(self._api_key.value))
            secrets = (*secrets, self._api_key.value)
        headers = _overridden(headers, self._extra_headers)
        secrets = (*secrets, *self._sessions.added_secrets(self.url, headers))
        request = HTTPRequest(
            self.url,
            payload,
            self.dialect,
            headers,
            secret_forms(secrets),  # (as a server may echo them: trimmed, JSON-escaped)
            max_line_bytes=self.max_line_bytes,
            max_event_bytes=self.max_event_bytes,
        )
        return stream_updates(request, self._sessions, self.timeouts, self.retry)

    async def aclose(self) -> None:
        """End the calls still running, then close the sessions this client created.

        A running stream ends at once, after the updates it already
        delivered, with a non-retryable
        :class:`~rafrx.errors.TransportError` ("client closed"); one waiting
        to retry sends nothing more. A session given to the client is not
        closed. The client stays usable: a later ``stream()`` opens a new
        session.

        Example:
            >>> import asyncio
            >>> from rafrx.errors import TransportError
            >>> from rafrx.testing import LLMServer, Reply
            >>> async def main() -> str:
            ...     async with LLMServer() as server:
            ...         server.enqueue(Reply(text="slow " * 100, chunk_size=1, delay=0.01))
            ...         client = OpenAIChatClient(server.url)
            ...         ended = asyncio.get_running_loop().create_future()
            ...         client.stream([ChatMessage.user("Hi")]).subscribe(on_error=ended.set_result)
            ...         await asyncio.sleep(0.1)
            ...         await client.aclose()
            ...         return type(await ended).__name__
            >>> asyncio.run(main())
            'TransportError'
        """
        await self._sessions.aclose()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _check_dialect(client: LLMClient) -> None:
    """Refuse a client whose class names no ``dialect`` (the stream format its server
    answers in), with a ``TypeError`` saying what to set, rather than failing at
    ``stream()``."""
    if getattr(client, "dialect", None) is None:
        known = ", ".join(repr(name) for name in sorted(DIALECTS))
        raise TypeError(
            f"{type(client).__name__} sets no dialect: give the class one, e.g. "
            f"dialect = 'openai-chat' (a name of rafrx.sources.dialects.DIALECTS: {known}; "
            f"or a dialect factory), the format of its server's stream"
        )


_USE_A_PROXY: Final = (
    "a session=aiohttp.ClientSession(proxy='http://user:password@host:port'), "
    "or trust_env=True for the environment's HTTPS_PROXY"
)
_USE_TLS: Final = "a session=aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=...))"

#: The transport settings other HTTP clients (httpx, requests, aiohttp, openai-python,
#: anthropic) take as keywords, which no provider takes as a request body field: given
#: to a client as ``**params`` they are a ``TypeError`` (see :func:`_check_body_fields`),
#: each with what to use instead. (``timeout`` is not among them: gateways such as
#: LiteLLM's take it in the body; the client's own are its ``timeouts=``.)
TRANSPORT_SETTINGS: Final = {
    "proxy": _USE_A_PROXY,
    "proxies": _USE_A_PROXY,
    "proxy_auth": "the credentials in the proxy's URL: " + _USE_A_PROXY,
    "auth": "api_key=, or headers={'Authorization': ...}",
    "http_client": "session= (an aiohttp.ClientSession)",
    "verify": _USE_TLS,
    "ssl": _USE_TLS,
    "default_headers": "headers=",
    "default_query": "the query in base_url ('https://host/v1?api-version=...')",
}


def _check_string(name: str, value: object) -> None:
    """Refuse a client's setting ``name`` (``api_key``, ``model``) that is neither a
    string nor ``None``, with a ``TypeError`` naming its type, never its value (a key):
    else it fails only once a call is sent, in words about ``.strip()``.

    Example:
        >>> _check_string("api_key", None)
        >>> _check_string("api_key", 1234)
        Traceback (most recent call last):
        ...
        TypeError: api_key takes a string (or None), not an int
    """
    if value is None or isinstance(value, str):
        return
    raise TypeError(f"{name} takes a string (or None), not {a_noun(type(value).__name__)}")


def _check_body_fields(params: Mapping[str, Any], given_to: str) -> None:
    """Refuse a transport setting (see :data:`TRANSPORT_SETTINGS`) among ``params``,
    the body fields ``given_to`` (``"OpenAIChatClient()"``, ``"….stream()"``) got, with
    a ``TypeError`` saying what to use instead, and never the value (a proxy's URL
    holds its password).

    Example:
        >>> _check_body_fields({"temperature": 0.2, "max_tokens": 50}, "C()")
        >>> try:
        ...     _check_body_fields({"proxy": "http://u:pw@p:1"}, "C()")
        ... except TypeError as refused:
        ...     print(str(refused).replace(": ", ":\\n").replace(", or", ",\\nor"))
        C() got proxy=, a transport setting, not a request body field (its other keywords go to the API in the request body):
        give a session=aiohttp.ClientSession(proxy='http://user:password@host:port'),
        or trust_env=True for the environment's HTTPS_PROXY
    """  # noqa: E501
    for name in params:
        instead = TRANSPORT_SETTINGS.get(name)
        if instead is not None:
            raise TypeError(
                f"{given_to} got {name}=, a transport setting, not a request body field "
                f"(its other keywords go to the API in the request body): give {instead}"
            )


def _shown_url(base_url: str) -> str:
    """``base_url`` as given, or :func:`masked_url` of it when it holds credentials or
    a query; one that is no absolute URL, with what may hold them masked.

    Example:
        >>> _shown_url("https://example.com/v1?key=AIza123&alt=sse")
        'https://example.com/v1?key=***&alt=***'
        >>> _shown_url("https://me:hunter2@example.com/v1")
        'https://me:***@example.com/v1'
        >>> _shown_url("me:hunter2@example.com/v1?key=AIza123")
        '***@example.com/v1?***'
    """
    url = URL(base_url)
    if not url.is_absolute():  # (yarl may read "me:pw@host" as a scheme and a path)
        shown, query, _ = base_url.partition("?")
        shown = shown.partition("#")[0]
        if "@" in shown:
            shown = "***@" + shown.rpartition("@")[2]
        return shown + ("?***" if query else "")
    return masked_url(url) if url.query_string or url.user else base_url


def _overridden(defaults: Mapping[str, str], given: Mapping[str, str]) -> dict[str, str]:
    """``defaults`` with the ``given`` headers over them, names compared without case
    (as HTTP compares them).

    Example:
        >>> _overridden({"Accept": "text/event-stream", "x-api-key": "k"}, {"accept": "*/*"})
        {'x-api-key': 'k', 'accept': '*/*'}
    """
    named = {name.lower() for name in given}
    return {**{k: v for k, v in defaults.items() if k.lower() not in named}, **given}


def _endpoint(base_url: str, endpoint: str, *, versioned_prefix: bool = False) -> URL:
    """The endpoint's URL: ``/v1/<endpoint>`` on a server root; on a path, the path
    is the API prefix, to which ``/v1`` is added first if ``versioned_prefix``
    and it does not end in it (the Anthropic SDK's rule).

    Example:
        >>> str(_endpoint("https://api.deepseek.com/anthropic", "messages", versioned_prefix=True))
        'https://api.deepseek.com/anthropic/v1/messages'
        >>> str(_endpoint("https://openrouter.ai/api/v1", "chat/completions"))
        'https://openrouter.ai/api/v1/chat/completions'
    """
    url = URL(base_url)
    if not url.is_absolute():
        raise ValueError(f"base_url must be an absolute URL, got {_shown_url(base_url)!r}")
    if url.scheme not in ("http", "https"):
        raise ValueError(f"base_url must be an http or https URL, got {_shown_url(base_url)!r}")
    prefix = url.raw_path.rstrip("/")  # (encoded: a gateway's "a%2Fb" stays one segment)
    if not prefix or (versioned_prefix and not prefix.endswith("/v1")):
        prefix += "/v1"
    return url.with_path(f"{prefix}/{endpoint}", keep_query=True, encoded=True)


class OpenAIChatClient(LLMClient):
    """OpenAI chat completions and every compatible server (DeepSeek, Groq,
    OpenRouter, Ollama, vLLM, llama.cpp, Gemini, Mistral, xAI, Azure …).

    Sends ``stream: true`` with ``stream_options.include_usage``
    (``stream_options=None`` sends none, for a server that refuses the field);
    tools as ``{"type": "function", "function": {...}}``, and ``tool_choice``
    and ``parallel_tool_calls`` only with tools (OpenAI refuses them alone).
    Besides :class:`LLMClient`'s arguments, ``reasoning_field``: the assistant
    message field that carries a past turn's reasoning back,
    ``"reasoning_content"`` by default (DeepSeek's, which refuses a tool loop
    without it; Kimi and Qwen read it too), ``"reasoning"`` (Ollama's), or
    ``None`` to send no reasoning, nor OpenRouter's ``reasoning_details``,
    LiteLLM's ``thinking_blocks`` or a call's Gemini ``extra_content`` (a
    server that refuses unknown fields, such as StepFun's).

    Example:
        >>> client = OpenAIChatClient("http://127.0.0.1:1", model="m", reasoning_field=None)
        >>> turn = [ChatMessage("assistant", "Hi.", reasoning="Greet.")]
        >>> client._payload(turn, [])["messages"]
        [{'role': 'assistant', 'content': 'Hi.'}]
    """

    dialect = "openai-chat"
    endpoint = "chat/completions"
    default_model = "gpt-4o-mini"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        *,
        reasoning_field: str | None = "reasoning_content",
        timeouts: Timeouts = Timeouts(),  # noqa: B008 - immutable
        retry: RetryPolicy | None = None,
        session: aiohttp.ClientSession | None = None,
        headers: Mapping[str, str] | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        trust_env: bool = False,
        **params: Any,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            model,
            timeouts=timeouts,
            retry=retry,
            session=session,
            headers=headers,
            max_line_bytes=max_line_bytes,
            max_event_bytes=max_event_bytes,
            trust_env=trust_env,
            **params,
        )
        self.reasoning_field = reasoning_field

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        wire = to_openai_chat(messages)
        if self.reasoning_field != "reasoning_content":
            for message in wire:
                reasoning = message.pop("reasoning_content", None)
                if self.reasoning_field is None:
                    message.pop("reasoning_details", None)
                    message.pop("thinking_blocks", None)
                    for call in message.get("tool_calls") or ():
                        call.pop("extra_content", None)  # (Gemini's thought signature)
                elif reasoning is not None:
                    message[self.reasoning_field] = reasoning
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            "stream_options": {"include_usage": True},
        }
        if tools:
            payload["tools"] = _tools(tools, ("function",), _chat_tool)
        return payload

    def _complete(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``stream_options`` given by the user keep ``include_usage`` unless they set it,
        and go when set to ``None``; the tool options go when no tools do."""
        options = payload.get("stream_options")
        if options is None:
            payload.pop("stream_options", None)
        elif isinstance(options, Mapping) and "include_usage" not in options:
            payload["stream_options"] = {"include_usage": True, **options}
        if not payload.get("tools"):  # ("only allowed when 'tools' are specified")
            payload.pop("tool_choice", None)
            payload.pop("parallel_tool_calls", None)
        return payload

    async def __aenter__(self) -> OpenAIChatClient:
        return self


def _function(
    name: str, description: str, parameters: dict[str, Any], strict: bool | None
) -> dict[str, Any]:
    """A function definition; ``strict`` only when the tool set it (chat's default is off)."""
    out = {"name": name, "description": description, "parameters": parameters}
    return out if strict is None else {**out, "strict": strict}


def _tools(
    tools: Sequence[ToolLike], own: tuple[str, ...], shape: Callable[[ToolLike], dict[str, Any]]
) -> list[dict[str, Any]]:
    """The request's tools: each in the provider's shape (``shape``), but a mapping of a
    kind the provider defines itself (a ``type`` not in ``own``: a Responses
    ``web_search``, a ``custom`` tool, Anthropic's ``web_search_20250305``) as given."""
    out = []
    for tool in tools:
        if isinstance(tool, Mapping) and _block_type(tool) not in (None, *own):
            out.append(copy.deepcopy(dict(tool)))
        else:
            out.append(shape(tool))
    return out


def _chat_tool(tool: ToolLike) -> dict[str, Any]:
    if isinstance(tool, Tool):
        spec = tool.to_openai()
    else:
        spec = {"type": "function", "function": _function(*tool_schema(tool), _strict(tool))}
    function = spec["function"]
    if len(function["description"]) > _CHAT_DESCRIPTION_MAX:
        function["description"] = _clipped(function["name"], function["description"])
    return spec


_CHAT_DESCRIPTION_MAX: Final = 1024  # OpenAI refuses a longer one: "string too long"


@functools.lru_cache(maxsize=256)  # (one warning a tool)
def _clipped(name: str, description: str) -> str:
    """A function description cut to the length chat completions take, with a warning."""
    _log.warning(
        "tool %r: its description (%d characters) is cut to the %d that chat completions take",
        name,
        len(description),
        _CHAT_DESCRIPTION_MAX,
    )
    return description[: _CHAT_DESCRIPTION_MAX - 1] + "…"


def _responses_tool(tool: ToolLike) -> dict[str, Any]:
    # "strict": False unless the tool says otherwise: the Responses API's default,
    # strict mode, rewrites the schema (every parameter required).
    if isinstance(tool, Tool):
        return tool.to_responses()
    return {"type": "function", **_function(*tool_schema(tool), _strict(tool) or False)}


def _anthropic_tool(tool: ToolLike) -> dict[str, Any]:
    if isinstance(tool, Tool):
        return tool.to_anthropic()
    name, description, parameters = tool_schema(tool)
    given: dict[str, Any] = {}
    if isinstance(tool, Mapping) and "input_schema" in tool:  # in Anthropic's own shape:
        given = copy.deepcopy(dict(tool))  # what else it says goes too (its cache_control ...)
        if given.get("type") != "custom":  # (the one type a tool of the caller's may say)
            given.pop("type", None)
    return {**given, "name": name, "description": description, "input_schema": parameters}


def _trim_final_assistant_text(wire: list[dict[str, Any]]) -> None:
    """A last assistant message (a prefill, a paused turn going on) without the
    trailing whitespace Anthropic refuses there ("final assistant content cannot
    end with trailing whitespace"): its last text block trimmed, left out when
    blank, and the message too when that leaves it empty."""
    if not wire or wire[-1]["role"] != "assistant":
        return
    blocks = wire[-1]["content"]
    last = blocks[-1]
    if last.get("type") != "text" or not isinstance(last.get("text"), str):
        return
    text = last["text"].rstrip()
    if text:
        blocks[-1] = {**last, "text": text}
        return
    del blocks[-1]
    if not blocks:
        del wire[-1]


class AnthropicClient(LLMClient):
    """Anthropic Messages (``x-api-key`` and ``anthropic-version`` headers).

    System messages become ``system``; tools ``{"name", "description",
    "input_schema"}``; a conversation ending with an assistant message (a
    prefill) ends without trailing whitespace, which the API refuses there.
    Besides :class:`LLMClient`'s arguments: ``max_tokens`` (required by the
    API; 4096 by default) and ``anthropic_version``.
    """

    dialect = "anthropic"
    endpoint = "messages"
    versioned_prefix = True
    default_model = "claude-sonnet-4-5"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        *,
        max_tokens: int = 4096,
        anthropic_version: str = "2023-06-01",
        timeouts: Timeouts = Timeouts(),  # noqa: B008 - immutable
        retry: RetryPolicy | None = None,
        session: aiohttp.ClientSession | None = None,
        headers: Mapping[str, str] | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        trust_env: bool = False,
        **params: Any,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            model,
            timeouts=timeouts,
            retry=retry,
            session=session,
            headers=headers,
            max_line_bytes=max_line_bytes,
            max_event_bytes=max_event_bytes,
            trust_env=trust_env,
            **params,
        )
        self.max_tokens = max_tokens
        self.anthropic_version = anthropic_version

    def _auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        system, wire = to_anthropic(messages)
        _trim_final_assistant_text(wire)
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": wire,
        }
        if system is not None:
            payload["system"] = system
        if tools:
            payload["tools"] = _tools(tools, ("function", "custom"), _anthropic_tool)
        container = pending_container(messages)
        if container is not None:  # (calls made by Claude's code wait in it)
            payload["container"] = container
        return payload

    def _protocol_headers(self) -> dict[str, str]:
        return {"anthropic-version": self.anthropic_version}

    async def __aenter__(self) -> AnthropicClient:
        return self


class OpenAIResponsesClient(LLMClient):
    """The OpenAI Responses API.

    Messages become ``input`` items (:func:`to_responses_input`); tools
    ``{"type": "function", "name", ...}``. See :class:`LLMClient` for the
    arguments.
    """

    dialect = "openai-responses"
    endpoint = "responses"
    default_model = "gpt-4o-mini"

    def _payload(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolLike]
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "input": to_responses_input(messages)}
        if tools:
            payload["tools"] = _tools(tools, ("function",), _responses_tool)
        return payload

    def _complete(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The items of the tools the server ran go back by reference (the API keeps
        them). With ``store: false`` nothing is kept server side: they go whole, and
        the request asks for the reasoning items' ``encrypted_content``, and sends none
        that lacks it (the API would look it up by id, and fail)."""
        items = payload.get("input") or ()
        if payload.get("store") is not False:
            if not isinstance(items, str):  # (a string is the API's one user message)
                payload["input"] = [_by_reference(item) for item in items]
            return payload
        include = list(payload.get("include") or ())
        if "reasoning.encrypted_content" not in include:
            payload["include"] = [*include, "reasoning.encrypted_content"]
        if not isinstance(items, str):
            payload["input"] = list(_resolvable(items))
        return payload

    async def __aenter__(self) -> OpenAIResponsesClient:
        return self
