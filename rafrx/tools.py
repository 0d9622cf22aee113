"""Tools: Python functions the model can call, with schemas, validation and timeouts.

``@tool`` turns a sync or async function into a :class:`Tool`: the name is the
function's, the description the docstring's text before its sections, and
the JSON schema of the parameters comes from the type hints (``str``, ``int``,
``float``, ``bool``, ``list[...]``, ``tuple[...]``, ``dict[str, ...]``,
``X | None``, ``Literal``, ``Enum``, attrs classes, dataclasses,
``TypedDict``, pydantic models, ``datetime``/``date`` as ISO strings,
``Annotated[X, "doc"]`` and ``Annotated[X, Field(ge=1)]``) with
per-parameter descriptions from the docstring (Google ``Args:``, Sphinx
``:param x:`` or NumPy ``Parameters``). Parameters with a default (also a
pydantic ``Field(default=...)``) are optional. A ``functools.partial`` or a
callable object works too: the parameters the partial leaves open, typed
by the hints of its function (of the object's ``__call__``).

Example:
    >>> @tool
    ... def weather(city: str, days: int = 1) -> str:
    ...     '''Forecast for a city.
    ...
    ...     Args:
    ...         city: The city's name.
    ...         days: How many days ahead.
    ...     '''
    ...     return f"{city}: sunny for {days} days"
    >>> weather.name, weather.description
    ('weather', 'Forecast for a city.')
    >>> weather.parameters["properties"]["city"]
    {'type': 'string', 'description': "The city's name."}
    >>> weather.parameters["required"]
    ['city']
    >>> import asyncio
    >>> asyncio.run(weather.invoke({"city": "Paris"}))
    'Paris: sunny for 1 days'
    >>> weather.validate({"city": "Paris", "days": True})
    Traceback (most recent call last):
    ...
    rafrx.errors.InvalidToolArguments: invalid arguments for tool 'weather': argument 'days': expected integer, got boolean true

:meth:`Tool.invoke` validates the arguments, converts them (enum values to
members, objects to attrs, dataclass or pydantic instances) and runs the function; sync functions
run in a worker thread (``asyncio.to_thread``) so they never block the event
loop. Definitions serialize to each provider's request format
(:meth:`Tool.to_openai`, :meth:`Tool.to_anthropic`, :meth:`Tool.to_responses`);
``@tool(strict=True)`` sends OpenAI the schema in its strict form.

The parts live in private modules with one job each: ``rafrx._docstrings``
(description and parameters), ``rafrx._schema`` (schemas and converters from
type hints), ``rafrx._constraints`` (``Annotated`` metadata),
``rafrx._pydantic`` (pydantic models and fields, when pydantic is in use),
``rafrx._schema_check`` (validation), ``rafrx._strict`` (OpenAI's strict
mode), ``rafrx._call`` (running sync or async functions) and
``rafrx._tool_result`` (:func:`format_result`).
"""  # noqa: E501

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Generic, final, overload

import attrs
from typing_extensions import ParamSpec, TypeVar

from rafrx._call import call_function, is_async
from rafrx._cycles import without_frames
from rafrx._docstrings import parse_docstring
from rafrx._schema import Binder, ConversionError, function_schema
from rafrx._schema_check import check, check_object, show
from rafrx._strict import strict_schema, without_nulls
from rafrx._tool_result import format_result
from rafrx.errors import (
    InvalidToolArguments,
    ToolError,
    ToolExecutionError,
    ToolTimeout,
    error_text,
)
from rafrx.events import ToolApprovalRequestEvent

__all__ = ["Tool", "ToolApprovalResponse", "as_tool", "format_result", "tool"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_is_async = is_async  # the name rafrx.operators._execute_tools imports


# ---------------------------------------------------------------- the tool


@final
@attrs.frozen
class ToolApprovalResponse:
    """An answer to a :class:`~rafrx.ToolApprovalRequestEvent`.

    An approver may return one instead of a bool (to tell the model why a
    call was denied), or a UI may push them into a ``Subject`` given as the
    approver.

    ``request``: the very :class:`~rafrx.ToolApprovalRequestEvent` answered
    (keyword only). An answer naming it approves that request only: a late or
    duplicate answer to an earlier request never approves a later call that
    reuses its ``call_id`` (some providers give every response the same ids).
    Without it, the answer goes to the open request of ``call_id``.

    Example:
        >>> ToolApprovalResponse("call_1", False, reason="not on Fridays").approved
        False
        >>> from rafrx import ToolApprovalRequestEvent
        >>> event = ToolApprovalRequestEvent("call_1", "delete", {"path": "a"})
        >>> ToolApprovalResponse("call_1", True, request=event).request is event
        True
    """

    call_id: str
    approved: bool
    reason: str | None = None
    request: ToolApprovalRequestEvent | None = attrs.field(
        default=None, kw_only=True, eq=False, repr=False
    )

    @request.validator
    def _answers_its_call(self, attribute: Any, request: ToolApprovalRequestEvent | None) -> None:
        if request is not None and request.call_id != self.call_id:
            raise ValueError(
                f"an answer to call {self.call_id!r} names the request of call {request.call_id!r}"
            )


CANCEL_GRACE: Final = 0.1
"""Seconds a timed-out async tool is given to finish its cancellation before the call ends."""


def _valid_name(instance: Any, attribute: Any, value: str) -> None:
    if not _NAME.fullmatch(value):  # ($ alone would let a final "\n" through)
        raise ValueError(f"a tool name must match {_NAME.pattern}, got {value!r}")


def _object_schema(instance: Any, attribute: Any, value: Mapping[str, Any]) -> None:
    """Refuse ``parameters`` that are no object schema: OpenAI and Anthropic refuse a
    tool whose arguments are not a JSON object (``{"type": "string"}``), every call of
    the agent then failing with a 400."""
    if not isinstance(value, Mapping):
        raise TypeError(f"a tool's parameters are a JSON schema (a mapping), got {value!r}")
    kind = value.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise ValueError(
            "a tool's parameters are an object schema ({'type': 'object', 'properties': "
            f"...}}): providers refuse arguments of another type, got type {kind!r}"
        )


def _positive(instance: Any, attribute: Any, value: float | None) -> None:
    if value is not None and not value > 0:  # (NaN too: it would never time out)
        raise ValueError(f"timeout must be positive, got {value}")


P = ParamSpec("P", default=...)
R = TypeVar("R", default=Any)


@final
@attrs.frozen
class Tool(Generic[P, R]):
    """A function the model can call.

    Build one with :func:`tool`, or by hand for a function taking keyword
    arguments that follow ``parameters`` (then validation uses the schema
    only and no conversion happens).

    Attributes:
        name: The name the model calls it by (``[A-Za-z0-9_-]{1,64}``).
        description: What it does, for the model.
        parameters: The JSON schema (an object schema) of its arguments.
        fn: The sync or async function.
        requires_approval: Whether a call must be approved before it runs.
        timeout: Seconds a call may take; ``None`` for no limit.
        strict: Whether OpenAI is asked for arguments that always fit the
            schema: :attr:`strict_parameters` is sent instead, and a ``null``
            for an optional argument means its default.
        ends_turn: Whether a call that returns a result ends the agent's turn
            (no more LLM calls; see :func:`tool`).

    Example:
        >>> def echo(text: str) -> str:
        ...     return text
        >>> t = Tool("echo", "Echo the text.", {"type": "object",
        ...     "properties": {"text": {"type": "string"}}, "required": ["text"]}, echo)
        >>> t.to_openai()["function"]["name"], t.validate({"text": "hi"})
        ('echo', {'text': 'hi'})
    """

    name: str = attrs.field(validator=_valid_name)
    description: str
    parameters: Mapping[str, Any] = attrs.field(hash=False, validator=_object_schema)
    fn: Callable[P, R] = attrs.field(repr=False)
    requires_approval: bool = False
    timeout: float | None = attrs.field(default=None, validator=_positive)
    strict: bool = False
    ends_turn: bool = False
    _binder: Binder | None = attrs.field(
        default=None, kw_only=True, alias="binder", repr=False, eq=False, hash=False
    )
    _method: bool = attrs.field(default=False, kw_only=True, alias="method", repr=False)

    def __attrs_post_init__(self) -> None:
        if self.strict:
            self.strict_parameters  # noqa: B018 - a TypeError now, not a 400 from the API later

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly, as if it were not decorated (with its types)."""
        return self.fn(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Tool[..., R]:
        """A ``@tool`` method read from an instance: the tool of the bound method
        (``self`` never is a parameter the model sees)."""
        if not self._method or instance is None:
            return self
        return attrs.evolve(self, fn=functools.partial(self.fn, instance), method=False)

    # ------------------------------------------------------------ definitions

    @property
    def strict_parameters(self) -> dict[str, Any]:
        """The schema in OpenAI's strict form: every property required, optional ones
        nullable (``null`` means "use the default"), every object closed.

        Raises:
            TypeError: strict mode cannot express a parameter (an open ``dict``,
                ``Any``, a fixed-length ``tuple[int, str]``).
        """
        return strict_schema(_object(self.parameters))

    def to_openai(self) -> dict[str, Any]:
        """The Chat Completions ``tools`` entry (``"strict": true`` for a strict tool)."""
        function = self._function()
        if self.strict:
            function["strict"] = True
        return {"type": "function", "function": function}

    def _function(self) -> dict[str, Any]:
        """The function definition both OpenAI APIs use: name, description, parameters."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.strict_parameters if self.strict else _object(self.parameters),
        }

    def to_anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages ``tools`` entry."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": _object(self.parameters),
        }

    def to_responses(self) -> dict[str, Any]:
        """The OpenAI Responses API ``tools`` entry.

        ``"strict"`` is the tool's: the API's default, strict mode, would
        rewrite a schema not made for it (every parameter required, so a
        default never applies).
        """
        return {"type": "function", **self._function(), "strict": self.strict}

    # ------------------------------------------------------------ calling

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` (parsed JSON) and return them converted to Python values.

        Raises:
            InvalidToolArguments: listing every problem (missing required,
                unexpected, wrong type), each naming the argument; or naming
                the argument that fits the schema but not the type hint (an
                ISO string that is no date, an int too large for a float).
        """
        args, kwargs = self._bind(arguments)
        if args:
            skip = 1 if self._method else 0  # (read from its class: ``self`` is bound later)
            names = list(inspect.signature(self.fn).parameters)[skip : skip + len(args)]
            kwargs = {**dict(zip(names, args, strict=True)), **kwargs}
        return kwargs

    def _bind(self, arguments: Any) -> tuple[list[Any], dict[str, Any]]:
        if not isinstance(arguments, Mapping):
            raise self._invalid(f"arguments must be a JSON object, got {show(arguments)}")
        if self.strict:  # a null stands for an optional argument not given
            arguments = without_nulls(self.parameters, arguments)
        kind = self.parameters.get("type", "object")
        if kind == "object" or (isinstance(kind, list) and "object" in kind):
            problems = check_object(self.parameters, arguments, "")  # every problem
            if not problems:  # then what the schema says of the whole (anyOf, enum ...)
                error = check(_of_the_whole(self.parameters), arguments, "")
                problems = [error] if error else []
        else:
            error = check(self.parameters, arguments, "")
            problems = [error] if error else []
        if problems:
            raise self._invalid("; ".join(problems))
        if self._binder is None:
            return [], dict(arguments)
        try:
            return self._binder(arguments)
        except ConversionError as exc:
            raise self._invalid(str(exc)) from exc

    def _invalid(self, problem: str) -> InvalidToolArguments:
        return InvalidToolArguments(
            f"invalid arguments for tool {self.name!r}: {problem}", name=self.name
        )

    async def invoke(self, arguments: Any) -> Any:
        """Validate ``arguments``, run the function (in a thread if sync) and return its value.

        Raises:
            InvalidToolArguments: the arguments do not fit the schema.
            ToolTimeout: the call took longer than ``timeout`` (it is
                cancelled; a sync function's thread, or an async function
                that ignores the cancellation, runs on to its end unheeded,
                as it does when the call itself is cancelled).
            ToolExecutionError: the function raised; the message names the
                exception type and message (a :class:`~rafrx.errors.ToolError`
                it raises is passed on as is).
        """
        args, kwargs = self._bind(arguments)
        # Its own task, so that the deadline holds even for a function that ignores
        # its cancellation: after CANCEL_GRACE it is left to finish on its own, unheeded.
        caller = asyncio.current_task()
        cancels = 0 if caller is None else caller.cancelling()
        running = asyncio.ensure_future(self._call(args, kwargs, caller, cancels))
        try:
            finished, _ = await asyncio.wait((running,), timeout=self.timeout)
        except asyncio.CancelledError as cancelled:
            running.cancel()
            running.add_done_callback(_drop_outcome)  # how it ends is no one's concern now
            del running  # the raise below puts this frame in the traceback: no task in it
            raise without_frames(cancelled) from None
        if not finished:
            running.cancel()
            running.add_done_callback(_drop_outcome)
            await asyncio.wait((running,), timeout=CANCEL_GRACE)  # let it clean up
            raise ToolTimeout(
                f"tool {self.name!r} timed out after {self.timeout:g} s", name=self.name
            )
        try:
            return running.result()
        except (ToolError, KeyboardInterrupt):
            raise
        except BaseException as exc:  # any other: a CancelledError it raised, GreenletExit …
            raise self._raised(exc) from exc
        finally:
            del running, finished  # the task holds the error, whose traceback holds this frame

    async def _call(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        caller: asyncio.Task[Any] | None = None,
        cancels: int = 0,
    ) -> Any:
        # The caller cancelled (again: a cleanup may call a tool) before this task began:
        # the function never starts.
        if caller is not None and caller.cancelling() > cancels:
            raise asyncio.CancelledError
        try:
            return await call_function(self.fn, args, kwargs)
        except SystemExit as exc:  # argparse, sys.exit: an error result, not the loop's end
            raise self._raised(exc) from None

    def _raised(self, exc: BaseException) -> ToolExecutionError:
        if isinstance(exc, RuntimeError) and isinstance(exc.__cause__, StopIteration):
            exc = exc.__cause__  # PEP 479's wrapping (see rafrx._call): name what it raised
        text = error_text(exc)
        detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        return ToolExecutionError(f"tool {self.name!r} raised {detail}", name=self.name)


def _object(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` (the caller's to change), as an object schema even if it
    does not say so (Anthropic refuses an ``input_schema`` with no ``type``, OpenAI
    parameters of another type), as :func:`~rafrx.sources.clients.tool_schema` does."""
    sent = copy.deepcopy(dict(schema))
    if not sent:
        sent["properties"] = {}
    sent.setdefault("type", "object")
    return sent


def _of_the_whole(schema: Mapping[str, Any]) -> dict[str, Any]:
    """What an object schema says of the object as a whole, not member by member.

    Example:
        >>> _of_the_whole({"type": "object", "anyOf": [{"required": ["a"]}], "required": []})
        {'anyOf': [{'required': ['a']}]}
    """
    return {
        key: schema[key] for key in ("enum", "const", "anyOf", "oneOf", "allOf") if key in schema
    }


def _drop_outcome(task: asyncio.Future[Any]) -> None:
    """Retrieve a timed-out call's late outcome, so that asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()


def _is_method(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a function defined in a class body taking ``self`` first."""
    if not inspect.isfunction(fn):
        return False
    owner, _, _ = fn.__qualname__.rpartition(".")
    first = next(iter(inspect.signature(fn).parameters), None)
    return first == "self" and bool(owner) and not owner.endswith("<locals>")


def _call_doc(cls: type) -> str | None:
    """The docstring of ``cls.__call__``, inherited from the nearest class of the user's
    that has one (never a builtin type's "Call self as a function.")."""
    for klass in cls.__mro__:
        call = vars(klass).get("__call__")
        doc = getattr(call, "__doc__", None)
        if call is not None and klass.__module__ != "builtins" and isinstance(doc, str):
            return inspect.cleandoc(doc)
    return None


def _make_tool(
    fn: Callable[P, R],
    name: str | None,
    description: str | None,
    **options: Any,
) -> Tool[P, R]:
    described = fn  # what has the name and docstring: a partial's function
    while isinstance(described, functools.partial):
        described = described.func
    doc = inspect.getdoc(described)
    if doc is None and not (inspect.isroutine(described) or isinstance(described, type)):
        doc = _call_doc(type(described))  # a callable object's method
    summary, docs = parse_docstring(doc)
    method = _is_method(fn)
    # A method's ``self`` is bound when the tool is read from an instance (Tool.__get__).
    loose: Callable[..., Any] = fn
    schema, binder = function_schema(functools.partial(loose, None) if method else fn, docs)
    return Tool(
        name or str(getattr(described, "__name__", type(described).__name__)),
        summary if description is None else description,
        schema,
        fn,
        **options,
        binder=binder,
        method=method,
    )


@overload
def tool(
    fn: Callable[P, R],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    timeout: float | None = None,
    strict: bool = False,
    ends_turn: bool = False,
) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    timeout: float | None = None,
    strict: bool = False,
    ends_turn: bool = False,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    timeout: float | None = None,
    strict: bool = False,
    ends_turn: bool = False,
) -> Tool[..., Any] | Callable[[Callable[..., Any]], Tool[..., Any]]:
    """Make a :class:`Tool` of a sync or async function; use bare or with options.

    Args:
        fn: The function (when used as ``@tool``), a ``functools.partial``
            or a callable object.
        name: The tool's name; the function's name by default (a partial's
            function's, a callable object's class's).
        description: Overrides the docstring's description.
        requires_approval: Ask the approver before each call.
        timeout: Seconds a call may take.
        strict: Ask OpenAI for arguments that always fit the schema
            (:attr:`Tool.strict_parameters` is sent; Anthropic gets the
            schema as it is).
        ends_turn: In an :class:`~rafrx.Agent`, a call that returns a result
            ends the turn: no LLM call follows, and the tool's result is the
            turn's last message (its ``finish_reason`` is
            ``FinishReason.TOOL_CALLS``). The other calls of the same LLM call
            still run. A call that fails (an exception, bad arguments, a
            timeout, a denied approval) does not: the model reads the error
            and goes on. For a tool whose result is the answer (a final
            structured output, a handoff), as OpenAI's Agents SDK's
            ``StopAtTools``.

    Raises:
        TypeError: a parameter's type hint has no JSON schema (or none in
            strict mode), or the function takes ``*args`` / ``**kwargs``.

    Example:
        >>> @tool(requires_approval=True, timeout=5)
        ... async def delete_file(path: str) -> str:
        ...     '''Delete a file.'''
        ...     return f"deleted {path}"
        >>> delete_file.requires_approval, delete_file.timeout, delete_file.to_anthropic()["name"]
        (True, 5, 'delete_file')

        A tool whose result is the turn's answer (an agent makes no LLM call
        after it has run):

        >>> @tool(ends_turn=True)
        ... def final_answer(answer: str) -> str:
        ...     '''Give the final answer.'''
        ...     return answer
        >>> final_answer.ends_turn, delete_file.ends_turn
        (True, False)

        A partial is described by its function; what it fixes by keyword is
        not the model's to set:

        >>> def search(query: str, api_key: str) -> str:
        ...     '''Search the web.'''
        ...     return query
        >>> web = tool(functools.partial(search, api_key="sk-..."))
        >>> web.name, web.description, list(web.parameters["properties"])
        ('search', 'Search the web.', ['query'])

        A method is a tool of its instance (``self`` is no parameter):

        >>> class Counter:
        ...     total = 0
        ...     @tool
        ...     def add(self, n: int) -> int:
        ...         '''Add n.'''
        ...         self.total += n
        ...         return self.total
        >>> counter = Counter()
        >>> list(counter.add.parameters["properties"]), asyncio.run(counter.add.invoke({"n": 2}))
        (['n'], 2)
    """
    options = {
        "requires_approval": requires_approval,
        "timeout": timeout,
        "strict": strict,
        "ends_turn": ends_turn,
    }
    if fn is not None:
        return _make_tool(fn, name, description, **options)
    return lambda f: _make_tool(f, name, description, **options)


def as_tool(value: Tool | Callable[..., Any]) -> Tool:
    """A :class:`Tool` as is, or a plain function made into one with :func:`tool`."""
    return value if isinstance(value, Tool) else tool(value)
