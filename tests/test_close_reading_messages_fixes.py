"""Regression tests for the bugs a close, line-by-line reading of rafrx's code found
(messages side; the passing pins of the same reading are in test_close_reading_messages.py).

Each test failed before its fix; its docstring tells what the user did, what went
wrong then, and why the behaviour now pinned is right.
"""

from __future__ import annotations

from typing import Any

import pytest
import reactivex

from rafrx import Agent
from rafrx.errors import InvalidToolArguments
from rafrx.sources.clients import AnthropicClient
from rafrx.testing import LLMServer, Reply, ToolCallSpec
from rafrx.tools import Tool, tool


class _Silent:
    """A client that answers nothing (for the Agent's argument checks)."""

    def stream(self, messages: Any, tools: Any = None) -> reactivex.Observable[Any]:
        return reactivex.empty()


# ---------------------------------------------------------------- tools / schema check


@pytest.mark.asyncio
async def test_a_tuple_items_schema_checks_each_position_and_the_tool_runs() -> None:
    """A hand-built tool whose schema uses the array form of ``items`` never runs.

    What the user does: builds a ``Tool`` by hand (as the ``Tool`` docstring
    says: "validation uses the schema only") from a JSON schema that was
    written for an earlier JSON Schema draft, e.g. an MCP server's or a zod
    (``zod-to-json-schema``, target draft-7) ``inputSchema`` for a point:
    ``{"type": "array", "items": [{"type": "integer"}, {"type": "integer"}]}``.
    Then the model calls it with ``{"p": [1, 2]}``.

    What happens: ``check`` (rafrx/_schema_check.py:142) reaches
    ``assert isinstance(schema, Mapping)`` with the list and raises a bare
    ``AssertionError``. ``execute_tools`` turns it into the result
    ``"Error: tool 'pick': AssertionError: "``. The tool never runs, whatever
    the model sends, and neither the user nor the model learns why. Under
    ``python -O`` the assert is gone and the error becomes an
    ``AttributeError`` ('list' object has no attribute 'get').

    What should happen: the array form of ``items`` is tuple validation in
    drafts 4 to 2019-09 (each item checked against the schema at its position,
    like ``prefixItems``), so ``[1, 2]`` fits and the tool runs. At the very
    least, a schema the checker cannot read should fail with a typed, clear
    error (``InvalidToolArguments`` or a ``TypeError`` when the Tool is built),
    not an empty ``AssertionError`` on every call. The module docstring lists
    ``items`` among the supported keywords.
    """
    ran: list[Any] = []
    schema = {
        "type": "object",
        "properties": {"p": {"type": "array", "items": [{"type": "integer"}, {"type": "integer"}]}},
        "required": ["p"],
    }
    pick = Tool("pick", "Pick a point.", schema, lambda p: ran.append(p) or "ok")
    async with LLMServer() as server:
        server.enqueue(Reply(tool_calls=[ToolCallSpec("pick", {"p": [1, 2]})]), Reply(text="done"))
        async with AnthropicClient(server.url, "k", model="claude") as client:
            response = await Agent(client, tools=[pick]).send("go")
    assert [m.content for m in response.tool_messages] == ["ok"]
    assert ran == [[1, 2]]


def test_a_tuple_items_schema_rejects_a_wrong_item_with_a_typed_error() -> None:
    """The same schema, a wrong item: the error should be ``InvalidToolArguments``.

    What the user does: calls ``Tool.validate({"p": ["x"]})`` on the tool
    above (the model sent a string where the schema wants an integer).

    What happens: a bare ``AssertionError`` (rafrx/_schema_check.py:142)
    escapes ``validate``, whose docstring promises ``InvalidToolArguments``
    "listing every problem".

    What should happen: ``InvalidToolArguments`` naming ``p[0]``.
    """
    schema = {
        "type": "object",
        "properties": {"p": {"type": "array", "items": [{"type": "integer"}]}},
    }
    pick = Tool("pick", "Pick.", schema, lambda p: p)
    with pytest.raises(InvalidToolArguments, match=r"p\[0\]"):
        pick.validate({"p": ["x"]})


@pytest.mark.asyncio
async def test_a_hand_built_tool_without_a_top_level_type_is_sent_as_an_object_schema() -> None:
    """``Tool.to_anthropic`` sends an ``input_schema`` with no ``type``, which Anthropic refuses.

    What the user does: builds a ``Tool`` by hand from a schema that says
    ``properties`` and ``required`` but no top-level ``"type": "object"`` (a
    common shorthand; OpenAI's old examples and many MCP/Codex tool schemas
    leave it out), and runs an ``Agent`` with ``AnthropicClient``.

    What happens: ``_object`` (rafrx/tools.py:328-334) adds the type only when
    the schema is empty (``{}``), so the request carries ``"input_schema":
    {"properties": ..., "required": ...}``. Anthropic answers 400
    "tools.0.custom.input_schema.type: Field required" (seen in
    lidge-jun/opencodex#75, Kilo-Org/kilocode#12238, BerriAI/litellm#31527),
    and OpenAI answers "schema must be a JSON Schema of 'type: "object"', got
    'type: "None"'" (browserbase/stagehand#1159). Every turn of the agent fails.

    What should happen: the same as for a mapping tool. ``tool_schema``
    (rafrx/sources/clients.py:131-132) already does
    ``schema.setdefault("type", "object")`` and its docstring says why: "one
    that does not say its type says "object" (Anthropic refuses it
    otherwise)". ``Tool._bind`` also reads a missing type as ``"object"``
    (tools.py:254). So the request should carry ``"type": "object"``.
    """
    echo = Tool(
        "echo",
        "Echo the text.",
        {"properties": {"text": {"type": "string"}}, "required": ["text"]},
        lambda text: text,
    )
    async with LLMServer() as server:
        server.enqueue(Reply(text="hi"))
        async with AnthropicClient(server.url, "k", model="claude") as client:
            await Agent(client, tools=[echo]).send("go")
    sent = server.requests[0].json["tools"][0]["input_schema"]
    assert sent.get("type") == "object"


def test_validate_names_the_right_parameter_for_a_method_tool_read_from_its_class() -> None:
    """``Tool.validate`` puts a positional-only argument under the name ``self``.

    What the user does: a ``@tool`` method with a positional-only parameter,
    read from the class (``Counter.add``, e.g. when listing a class's tools
    for a registry), and ``validate({"n": 2})``.

    What happens: the binder was built over ``functools.partial(fn, None)``
    (tools.py:368), so its positional ``args`` leave out ``self``. But
    ``validate`` names them from ``inspect.signature(self.fn)`` (tools.py:245),
    and for a tool read from the class ``fn`` is the plain function, whose
    first parameter is ``self``. The result is ``{"self": 2}``: an off-by-one.

    What should happen: ``{"n": 2}``, as for the same tool read from an
    instance (where ``fn`` is ``partial(fn, instance)``). ``validate``'s
    docstring: "return them converted to Python values" keyed by argument.
    """

    class Counter:
        @tool
        def add(self, n: int, /) -> int:
            """Add n."""
            return n

    assert Counter().add.validate({"n": 2}) == {"n": 2}  # (read from an instance: right)
    assert Counter.add.validate({"n": 2}) == {"n": 2}


def test_a_nan_timeout_is_refused() -> None:
    """``tool(fn, timeout=float("nan"))`` is accepted and sets no limit.

    What the user does: reads a tool timeout from configuration
    (``float(os.environ.get("TOOL_TIMEOUT", "nan"))``, a pandas cell) and
    gets NaN.

    What happens: ``_positive`` (tools.py:122-124) tests ``value <= 0``,
    which is false for NaN, so the Tool is built; ``asyncio.wait(timeout=nan)``
    then never times out (a 0.2 s call with a NaN timeout returns normally
    after 0.2 s), so the call has no deadline at all.

    What should happen: ``ValueError("timeout must be positive, got nan")``,
    as the validator's own message says: NaN is not positive. (``not value >
    0`` instead of ``value <= 0`` catches it.)
    """

    def f(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="positive"):
        tool(f, timeout=float("nan"))


# ---------------------------------------------------------------- agent


def test_an_openai_style_message_dict_given_to_run_gets_an_error_naming_the_dict() -> None:
    """``agent.run({"role": "user", "content": "hi"})`` says the input is not ``'role'``.

    What the user does: passes an OpenAI-shaped message dict (the format
    every other SDK takes) to ``Agent.run`` / ``Agent.send``.

    What happens: ``_as_input`` (agent.py:108) does ``tuple(value)`` on the
    Mapping, which gives its keys, and raises ``TypeError: an agent's input
    is a str or ChatMessage, not 'role'``. The message contradicts itself
    (``'role'`` *is* a str) and names a key, not what the user passed.
    ``agent.run(["hi", "there"])`` gets the same self-contradicting "not 'hi'".

    What should happen: a ``TypeError`` naming the dict (and, helpfully,
    ``ChatMessage.from_openai``), as ``_messages_from`` does for a history
    provider that returns a Mapping (agent.py:143 treats a Mapping as one
    value, not an iterable of messages).
    """
    agent = Agent(_Silent())
    with pytest.raises(TypeError) as caught:
        agent.run({"role": "user", "content": "hi"})
    assert "'content'" in str(caught.value) or "dict" in str(caught.value)


def test_a_single_server_tool_mapping_given_as_tools_gets_an_error_about_tools() -> None:
    """``Agent(client, tools={"type": "web_search"})`` fails with "'type' is not a callable object".

    What the user does: passes one server tool mapping (the README's
    ``{"type": "web_search_20250305", "name": "web_search"}``) as ``tools``
    without wrapping it in a list.

    What happens: the ``tools`` setter (agent.py:258) iterates the mapping's
    keys, ``as_tool("type")`` tries to make a tool of the string, and the
    error is ``TypeError: 'type' is not a callable object``, which names a
    key and says nothing about ``tools``.

    What should happen: either the mapping taken as the one server tool it
    is, or a ``TypeError`` that says ``tools`` takes an iterable of tools and
    shows the mapping.
    """
    server_tool = {"type": "web_search"}
    with pytest.raises(TypeError, match=r"tools are a list \(tools=\[\.\.\.\]\), not one dict"):
        Agent(_Silent(), tools=server_tool)  # type: ignore[arg-type]
    agent = Agent(_Silent(), tools=[server_tool])
    with pytest.raises(TypeError, match="not one Tool"):
        agent.tools = agent_tool  # type: ignore[assignment]
    assert agent.tools == (server_tool,)  # (a refused assignment changes nothing)


@tool
def agent_tool(x: int) -> int:
    """Return ``x``."""
    return x


def test_a_message_content_of_none_reads_as_empty_text_and_a_list_is_refused_up_front() -> None:
    """``ChatMessage("assistant", None)`` (OpenAI's content of a message with only tool
    calls, as a user copies it) was stored as ``None`` and failed only when the history
    was sent, inside ``to_anthropic`` ("'NoneType' object is not subscriptable").

    Now ``None`` is the empty text, also through ``from_dict``, and content that is not
    text (OpenAI content parts) is refused when the message is made, pointing to the
    readers of content parts.
    """
    from rafrx import ChatMessage
    from rafrx.messages import to_anthropic

    message = ChatMessage.from_dict({"role": "assistant", "content": None})
    assert message.content == ""
    assert ChatMessage("assistant", None).content == ""  # type: ignore[arg-type]
    _system, sent = to_anthropic([ChatMessage.user("hi"), message])
    assert sent[0]["role"] == "user"
    with pytest.raises(TypeError, match=r"content is text \(str\), not a list.*from_openai"):
        ChatMessage("user", [{"type": "text", "text": "hi"}])  # type: ignore[arg-type]
