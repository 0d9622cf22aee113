"""End to end: tools with rich parameters (pydantic models, dataclasses, TypedDicts,
``Field`` constraints and defaults), strict mode, docstring styles and pydantic
results, driven by an :class:`~rafrx.agent.Agent` over real HTTP against
:class:`~rafrx.testing.LLMServer` with each of the three clients.

What the model is offered and what it is sent back is read from
``server.requests``, in each wire format; strict definitions are compared with
openai-python's own strict-schema helper.
"""

import asyncio
import dataclasses
import datetime
import enum
import functools
import io
import json
import threading
import time
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, Union

import annotated_types as at
import pytest
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field, create_model, field_validator
from reactivex import operators as rx
from typing_extensions import TypedDict

from rafrx import recorder
from rafrx.agent import Agent
from rafrx.errors import HTTPStatusError
from rafrx.events import ToolApprovalRequestEvent
from rafrx.history import InMemoryHistoryProvider
from rafrx.messages import ChatMessage, from_anthropic, to_anthropic, to_openai_chat
from rafrx.notebook import live, message_html, response_html, result_html, text_display, timeline
from rafrx.operators._aggregate import collect_agent_response
from rafrx.response import AgentResponse, FinishReason
from rafrx.sources.clients import (
    AnthropicClient,
    LLMClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.testing import LLMServer, RecordedRequest, Reply, ToolCallSpec
from rafrx.tools import tool

CLIENTS: dict[str, type[LLMClient]] = {
    "openai-chat": OpenAIChatClient,
    "anthropic": AnthropicClient,
    "openai-responses": OpenAIResponsesClient,
}


@pytest.fixture(params=sorted(CLIENTS))
def client_class(request: pytest.FixtureRequest) -> type[LLMClient]:
    return CLIENTS[request.param]


# ---------------------------------------------------------------- wire helpers


def sent_results(request: RecordedRequest) -> dict[str, str]:
    """Each tool result a request carries back, by call id, in any wire format."""
    out: dict[str, str] = {}
    for item in request.messages:
        if request.wire_format == "openai-chat" and item.get("role") == "tool":
            out[item["tool_call_id"]] = item["content"]
        elif request.wire_format == "openai-responses" and item.get("type") == (
            "function_call_output"
        ):
            out[item["call_id"]] = item["output"]
        elif request.wire_format == "anthropic" and isinstance(item.get("content"), list):
            for block in item["content"]:
                if block.get("type") == "tool_result":
                    out[block["tool_use_id"]] = block["content"]
    return out


def anthropic_errors(request: RecordedRequest) -> dict[str, bool]:
    """Anthropic ``tool_result`` blocks' ``is_error``, by call id."""
    return {
        block["tool_use_id"]: bool(block.get("is_error"))
        for item in request.messages
        if isinstance(item.get("content"), list)
        for block in item["content"]
        if block.get("type") == "tool_result"
    }


def sent_calls(request: RecordedRequest) -> dict[str, tuple[str, Any]]:
    """Each assistant tool call a request carries back: id → (name, parsed arguments)."""
    out: dict[str, tuple[str, Any]] = {}
    for item in request.messages:
        if request.wire_format == "openai-chat":
            for call in item.get("tool_calls") or ():
                fn = call["function"]
                out[call["id"]] = (fn["name"], json.loads(fn["arguments"]))
        elif request.wire_format == "openai-responses" and item.get("type") == "function_call":
            out[item["call_id"]] = (item["name"], json.loads(item["arguments"]))
        elif request.wire_format == "anthropic" and isinstance(item.get("content"), list):
            for block in item["content"]:
                if block.get("type") == "tool_use":
                    out[block["id"]] = (block["name"], block["input"])
    return out


def offered(request: RecordedRequest) -> dict[str, dict[str, Any]]:
    """The tool definitions of a request, by name, as sent."""
    out = {}
    for entry in request.body.get("tools") or ():
        name = entry["function"]["name"] if "function" in entry else entry["name"]
        out[name] = entry
    return out


def offered_schema(request: RecordedRequest, name: str) -> dict[str, Any]:
    entry = offered(request)[name]
    if request.wire_format == "openai-chat":
        return dict(entry["function"]["parameters"])
    if request.wire_format == "anthropic":
        return dict(entry["input_schema"])
    return dict(entry["parameters"])


def resolved(node: Any, defs: dict[str, Any]) -> Any:
    """A JSON schema with every ``$ref`` inlined and pydantic's titles left out."""
    if isinstance(node, dict):
        if "$ref" in node:
            base = resolved(defs[node["$ref"].rpartition("/")[2]], defs)
            return {**base, **{k: resolved(v, defs) for k, v in node.items() if k != "$ref"}}
        return {k: resolved(v, defs) for k, v in node.items() if k not in ("title", "$defs")}
    if isinstance(node, list):
        return [resolved(x, defs) for x in node]
    return node


# ---------------------------------------------------------------- the types


class Address(BaseModel):
    """A postal address.

    Attributes:
        street: The street and number.
    """

    street: str
    zip: str = Field(pattern=r"^\d{5}$", description="Five digits.")


class Quote(BaseModel):
    total: float
    currency: str = "EUR"
    valid_until: datetime.date


@dataclasses.dataclass
class Parcel:
    """A parcel.

    Attributes:
        weight: Kilograms.
    """

    weight: float
    fragile: bool = False

    def __post_init__(self) -> None:
        if self.weight <= 0:
            raise ValueError("weight must be positive")


class Options(TypedDict):
    express: bool
    note: NotRequired[str]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


RECEIVED: list[Any] = []


@tool
def quote(to: Address, parcel: Parcel, options: Options, ship_on: datetime.date) -> Quote:
    """Quote a shipment."""
    RECEIVED.append((to, parcel, options, ship_on))
    return Quote(total=9.5 * parcel.weight, valid_until=ship_on + datetime.timedelta(days=7))


@tool
def label(parcel: Parcel) -> Parcel:
    """Print a label (gives the parcel back)."""
    return dataclasses.replace(parcel, fragile=True)


async def turn(
    client_class: type[LLMClient],
    tools: list[Any],
    *replies: Reply,
    **agent_options: Any,
) -> tuple[AgentResponse, list[RecordedRequest]]:
    """One agent turn against a fresh server; the response and what the server received."""
    async with LLMServer() as server, client_class(server.url, "sk-test") as client:
        server.enqueue(*replies)
        response = await Agent(client, tools=tools, **agent_options).send("Go.")
        return response, list(server.requests)


# ================================================================ rich parameters


@pytest.mark.asyncio
async def test_rich_arguments_arrive_as_instances_and_results_go_back_as_json(
    client_class: type[LLMClient],
) -> None:
    RECEIVED.clear()
    args = {
        "to": {"street": "1 Main St", "zip": "12345"},
        "parcel": {"weight": 2},
        "options": {"express": True},
        "ship_on": "2024-05-01",
    }
    response, requests = await turn(
        client_class,
        [quote, label],
        Reply(
            tool_calls=[
                ToolCallSpec("quote", args, id="q1"),
                ToolCallSpec("label", {"parcel": {"weight": 1.5}}, id="l1"),
            ]
        ),
        Reply(text="19 EUR."),
    )
    assert [
        (
            Address(street="1 Main St", zip="12345"),
            Parcel(weight=2.0),
            {"express": True},
            datetime.date(2024, 5, 1),
        )
    ] == RECEIVED
    to, parcel, _, _ = RECEIVED[0]
    assert type(to) is Address
    assert type(parcel) is Parcel
    assert type(parcel.weight) is float
    expected = {
        "q1": '{"total": 19.0, "currency": "EUR", "valid_until": "2024-05-08"}',
        "l1": '{"weight": 1.5, "fragile": true}',
    }
    assert sent_results(requests[1]) == expected
    assert {m.tool_call_id: m.content for m in response.tool_messages} == expected
    # the call goes back as the model sent it, not as the converted values
    assert sent_calls(requests[1])["q1"] == ("quote", args)
    assert response.text == "19 EUR."
    assert response.finish_reason is FinishReason.STOP


@pytest.mark.asyncio
async def test_invalid_arguments_go_back_naming_the_argument_and_the_loop_goes_on(
    client_class: type[LLMClient],
) -> None:
    class Signup(BaseModel):
        email: str

        @field_validator("email")
        @classmethod
        def has_at(cls, value: str) -> str:
            if "@" not in value:
                raise ValueError("not an email address")
            return value

    @tool
    def register(user: Signup, seats: Annotated[int, Field(ge=1, le=10)] = 1) -> str:
        """Register a user."""
        return f"{user.email} x{seats}"

    ok = {"to": {"street": "x", "zip": "12345"}, "options": {"express": False}}
    response, requests = await turn(
        client_class,
        [quote, register],
        Reply(
            tool_calls=[
                ToolCallSpec("quote", {**ok, "parcel": {"weight": 1}, "ship_on": "2024-5-1"},
                             id="bad_date"),
                ToolCallSpec("quote", {**ok, "to": {"street": "x", "zip": "1234"},
                                       "parcel": {"weight": 1}, "ship_on": "2024-05-01"},
                             id="bad_zip"),
                ToolCallSpec("quote", {**ok, "parcel": {"weight": -1}, "ship_on": "2024-05-01"},
                             id="bad_parcel"),
                ToolCallSpec("register", {"user": {"email": "nobody"}}, id="bad_email"),
                ToolCallSpec("register", {"user": {"email": "a@b.c"}, "seats": 11},
                             id="bad_seats"),
                ToolCallSpec("register", {"user": {"email": "a@b.c"}, "seats": 2}, id="good"),
            ]
        ),
        Reply(text="Some failed."),
    )  # fmt: skip
    results = sent_results(requests[1])
    prefix_q = "Error: invalid arguments for tool 'quote': "
    prefix_r = "Error: invalid arguments for tool 'register': "
    assert results["bad_date"].startswith(prefix_q + "argument 'ship_on': ValueError")
    assert results["bad_zip"] == (
        prefix_q + "argument 'to.zip': expected a string matching '^\\\\d{5}$', got string \"1234\""
    )
    assert (
        results["bad_parcel"] == prefix_q + "argument 'parcel': ValueError: weight must be positive"
    )
    assert results["bad_email"].startswith(prefix_r + "argument 'user': ValidationError")
    assert "not an email address" in results["bad_email"]
    assert (
        results["bad_seats"] == prefix_r + "argument 'seats': expected at most 10, got integer 11"
    )
    assert results["good"] == "a@b.c x2"
    if requests[1].wire_format == "anthropic":
        flags = anthropic_errors(requests[1])
        assert flags == {k: k != "good" for k in results}
    assert len(requests) == 2
    assert response.text == "Some failed."


@pytest.mark.asyncio
async def test_union_of_models_is_converted_to_the_member_that_fits(
    client_class: type[LLMClient],
) -> None:
    class Card(BaseModel):
        kind: Literal["card"] = "card"
        number: str = Field(pattern=r"^\d{16}$")

    class Transfer(BaseModel):
        kind: Literal["transfer"] = "transfer"
        iban: str

    paid: list[Any] = []

    @tool
    def pay(method: Card | Transfer, amount: Annotated[float, at.Gt(0)]) -> str:
        """Pay."""
        paid.append((method, amount))
        return type(method).__name__

    _, requests = await turn(
        client_class,
        [pay],
        Reply(
            tool_calls=[
                ToolCallSpec("pay", {"method": {"kind": "transfer", "iban": "DE00"}, "amount": 5}),
                ToolCallSpec("pay", {"method": {"number": "1" * 16}, "amount": 1.5}),
                ToolCallSpec("pay", {"method": {"number": "1" * 16}, "amount": 0}),
            ]
        ),
        Reply(text="Paid."),
    )
    assert paid == [(Transfer(iban="DE00"), 5.0), (Card(number="1" * 16), 1.5)]
    results = list(sent_results(requests[1]).values())
    assert results[:2] == ["Transfer", "Card"]
    assert results[2] == (
        "Error: invalid arguments for tool 'pay': argument 'amount': "
        "expected more than 0, got integer 0"
    )


# ================================================================ strict mode


class Leg(BaseModel):
    origin: str
    destination: str = Field(min_length=3, max_length=3, description="IATA code.")


class Passenger(BaseModel):
    name: str = Field(pattern=r"^[A-Z]")
    age: int | None


@dataclasses.dataclass
class Bag:
    kilos: float
    kind: Literal["cabin", "hold"]


class Meal(TypedDict):
    vegan: bool


# (no docstrings and no defaults here: pydantic would keep a docstring whole, and strict
# mode's nullable optional parameters are rafrx's own, documented choice)
@tool(strict=True)
def book(legs: list[Leg], passenger: Passenger, seat: Literal["aisle", "window"],
         color: Color, when: datetime.date, count: Annotated[int, Field(ge=1, le=9)],
         bag: Bag | None, meals: list[Meal], at_time: datetime.datetime) -> str:  # fmt: skip
    """Book a trip."""
    return "booked"


@pytest.mark.asyncio
async def test_strict_definition_is_what_openai_wants_and_anthropic_gets_the_plain_schema(
    client_class: type[LLMClient],
) -> None:
    _, requests = await turn(client_class, [book, quote], Reply(text="Hi."))
    sent = offered(requests[0])
    wire = requests[0].wire_format
    if wire == "anthropic":
        assert sent["book"] == {
            "name": "book",
            "description": "Book a trip.",
            "input_schema": book.parameters,
        }
        assert "strict" not in json.dumps(sent)
        return
    # openai-python's own strict form of the same parameters (every one required here)
    hints = typing.get_type_hints(book.fn, include_extras=True)
    del hints["return"]
    fields: dict[str, Any] = {k: (v, ...) for k, v in hints.items()}
    model = create_model("book", **fields)
    theirs = to_strict_json_schema(model)
    theirs = resolved(theirs, theirs.get("$defs", {}))
    ours = offered_schema(requests[0], "book")
    assert ours == book.strict_parameters
    assert ours["properties"] == theirs["properties"]
    assert sorted(ours["required"]) == sorted(theirs["required"])
    assert ours["additionalProperties"] is False
    assert theirs["additionalProperties"] is False
    if wire == "openai-chat":
        assert sent["book"]["function"]["strict"] is True
        assert "strict" not in sent["quote"]["function"]  # chat's default: not strict
    else:
        assert sent["book"]["strict"] is True
        assert sent["quote"]["strict"] is False  # the Responses API would rewrite it


@tool(strict=True)
def ship(
    parcel: Parcel,
    options: Options,
    to: Address | None = None,
    copies: Annotated[int, Field(ge=1)] = 2,
    tint: Color = Color.BLUE,
    tags: list[str] = Field(default_factory=lambda: ["std"]),  # noqa: B008
    note: str = Field(default="n/a", max_length=20),
) -> dict[str, Any]:
    """Ship a parcel."""
    return {"parcel": parcel, "options": options, "to": to, "copies": copies,
            "tint": tint, "tags": tags, "note": note}  # fmt: skip


@pytest.mark.asyncio
async def test_strict_null_for_an_optional_argument_means_its_default(
    client_class: type[LLMClient],
) -> None:
    nulls = {
        "parcel": {"weight": 3, "fragile": None},
        "options": {"express": False, "note": None},
        "to": None,
        "copies": None,
        "tint": None,
        "tags": None,
        "note": None,
    }
    _, requests = await turn(
        client_class,
        [ship],
        Reply(tool_calls=[ToolCallSpec("ship", nulls, id="n1")]),
        Reply(text="Shipped."),
    )
    assert json.loads(sent_results(requests[1])["n1"]) == {
        "parcel": {"weight": 3.0, "fragile": False},
        "options": {"express": False},
        "to": None,
        "copies": 2,
        "tint": "blue",
        "tags": ["std"],
        "note": "n/a",
    }
    # the call itself goes back with the nulls the model sent
    assert sent_calls(requests[1])["n1"] == ("ship", nulls)


@pytest.mark.asyncio
async def test_strict_null_inside_a_pydantic_model_and_a_list_means_the_field_default() -> None:
    class Stop(BaseModel):
        city: str
        nights: int = 1

    class Trip(BaseModel):
        stops: list[Stop]
        budget: float | None = None
        title: str = "Trip"

    @tool(strict=True)
    def plan(trip: Trip) -> Trip:
        """Plan a trip."""
        return trip

    args = {
        "trip": {
            "stops": [{"city": "Oslo", "nights": None}, {"city": "Rome", "nights": 3}],
            "budget": None,
            "title": None,
        }
    }
    _, requests = await turn(
        OpenAIResponsesClient,
        [plan],
        Reply(tool_calls=[ToolCallSpec("plan", args, id="p1")]),
        Reply(text="Planned."),
    )
    assert sent_results(requests[1])["p1"] == (
        '{"stops": [{"city": "Oslo", "nights": 1}, {"city": "Rome", "nights": 3}], '
        '"budget": null, "title": "Trip"}'
    )


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"] = "dog"
    bark: str = "woof"


@pytest.mark.asyncio
async def test_strict_null_in_the_second_member_of_a_union_means_its_default() -> None:
    adopted: list[Any] = []

    @tool(strict=True)
    def adopt(pet: Cat | Dog) -> str:
        """Adopt a pet."""
        adopted.append(pet)
        return "adopted"

    _, requests = await turn(
        OpenAIChatClient,
        [adopt],
        Reply(tool_calls=[ToolCallSpec("adopt", {"pet": {"kind": "dog", "bark": None}}, id="d")]),
        Reply(text="Done."),
    )
    assert sent_results(requests[1]) == {"d": "adopted"}
    assert adopted == [Dog()]


class Owner(BaseModel):
    name: str
    pet: Annotated[Union[Cat, Dog], Field(discriminator="kind")]  # noqa: UP007


@pytest.mark.asyncio
async def test_strict_null_inside_a_discriminated_union_means_the_default() -> None:
    owners: list[Owner] = []

    @tool(strict=True)
    def register_owner(owner: Owner) -> str:
        """Register a pet owner."""
        owners.append(owner)
        return "ok"

    _, requests = await turn(
        OpenAIResponsesClient,
        [register_owner],
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "register_owner",
                    {"owner": {"name": "Ann", "pet": {"kind": "cat", "lives": None}}},
                    id="o1",
                )
            ]
        ),
        Reply(text="Done."),
    )
    assert sent_results(requests[1]) == {"o1": "ok"}
    assert owners == [Owner(name="Ann", pet=Cat())]


@pytest.mark.asyncio
async def test_strict_tool_that_cannot_be_expressed_fails_at_decoration_not_on_the_wire() -> None:
    class Loose(BaseModel):
        extra: dict[str, int]

    with pytest.raises(TypeError, match="strict mode cannot express"):

        @tool(strict=True)
        def take(loose: Loose) -> str:
            """Take."""
            return ""

    @tool
    def take_plain(loose: Loose) -> str:
        """Take."""
        return str(loose.extra)

    _, requests = await turn(
        OpenAIChatClient,
        [take_plain],
        Reply(tool_calls=[ToolCallSpec("take_plain", {"loose": {"extra": {"a": 1}}}, id="t")]),
        Reply(text="Ok."),
    )
    assert sent_results(requests[1]) == {"t": "{'a': 1}"}
    assert "strict" not in offered(requests[0])["take_plain"]["function"]


# ================================================================ methods, partials, objects


class Depot:
    def __init__(self, name: str) -> None:
        self.name = name
        self.parcels: list[Parcel] = []

    @tool(strict=True)
    def store(self, parcel: Parcel, shelf: Annotated[int, Field(ge=1)] = 1) -> dict[str, Any]:
        """Store a parcel.

        :param parcel: What to store.
        :param shelf: Which shelf.
        """
        self.parcels.append(parcel)
        return {"depot": self.name, "shelf": shelf, "count": len(self.parcels)}


def insure(policy: str, to: Address, value: float = Field(default=100.0, gt=0)) -> Quote:
    """Insure a shipment.

    Parameters
    ----------
    to : Address
        Where it goes.
    value : float, optional
        What it is worth.
    """
    return Quote(total=value * 0.01, currency=policy, valid_until=datetime.date(2030, 1, 1))


class Weigher:
    """Weigh parcels."""

    async def __call__(self, parcels: list[Parcel]) -> float:
        await asyncio.sleep(0)
        return sum(p.weight for p in parcels)


@pytest.mark.asyncio
async def test_method_partial_and_callable_object_tools_with_rich_types(
    client_class: type[LLMClient],
) -> None:
    north, south = Depot("north"), Depot("south")
    insure_tool = tool(functools.partial(insure, "GBP"))
    response, requests = await turn(
        client_class,
        [north.store, insure_tool, tool(Weigher())],
        Reply(
            tool_calls=[
                ToolCallSpec("store", {"parcel": {"weight": 1, "fragile": None}, "shelf": None},
                             id="s1"),
                ToolCallSpec("store", {"parcel": {"weight": 2, "fragile": True}, "shelf": 4},
                             id="s2"),
                ToolCallSpec("insure", {"to": {"street": "x", "zip": "00001"}}, id="i1"),
                ToolCallSpec("Weigher", {"parcels": [{"weight": 1.5}, {"weight": 2}]}, id="w1"),
            ]
        ),
        Reply(text="Done."),
    )  # fmt: skip
    assert north.parcels == [Parcel(1.0), Parcel(2.0, True)]
    assert south.parcels == []
    assert sent_results(requests[1]) == {
        "s1": '{"depot": "north", "shelf": 1, "count": 1}',
        "s2": '{"depot": "north", "shelf": 4, "count": 2}',
        "i1": '{"total": 1.0, "currency": "GBP", "valid_until": "2030-01-01"}',
        "w1": "3.5",
    }
    schemas = {name: offered_schema(requests[0], name) for name in offered(requests[0])}
    assert list(schemas) == ["store", "insure", "Weigher"]
    assert list(schemas["store"]["properties"]) == ["parcel", "shelf"]  # no self
    assert schemas["store"]["properties"]["parcel"]["description"] == "What to store."
    assert list(schemas["insure"]["properties"]) == ["to", "value"]  # no fixed policy
    assert schemas["insure"]["properties"]["value"]["description"] == "What it is worth."
    assert schemas["insure"]["properties"]["value"]["exclusiveMinimum"] == 0
    assert response.text == "Done."


# ================================================================ docstrings on the wire


def sphinx_tool(city: str, days: int = 1) -> str:
    """Forecast, Sphinx style.

    :param city: The city,
        in English.
    :type city: str
    :param int days: How many days.
    :returns: The forecast.
    """
    return city


def numpy_tool(city: str, days: int = 1) -> str:
    """Forecast, NumPy style.

    Parameters
    ----------
    city : str
        The city,
        in English.
    days : int, optional
        How many days.

    Returns
    -------
    str
        The forecast.
    """
    return city


@pytest.mark.asyncio
async def test_sphinx_and_numpy_docstrings_describe_the_tools_on_the_wire(
    client_class: type[LLMClient],
) -> None:
    tools = [tool(sphinx_tool), tool(numpy_tool, strict=True)]
    _, requests = await turn(client_class, tools, Reply(text="Hi."))
    for name, style in (("sphinx_tool", "Sphinx"), ("numpy_tool", "NumPy")):
        entry = offered(requests[0])[name]
        description = entry.get("description") or entry["function"]["description"]
        assert description == f"Forecast, {style} style."
        properties = offered_schema(requests[0], name)["properties"]
        assert properties["city"]["description"] == "The city, in English."
        assert properties["days"]["description"] == "How many days."


# ================================================================ history and display


@pytest.mark.asyncio
async def test_history_round_trip_keeps_the_rich_calls_and_a_fresh_agent_sends_the_same(
    client_class: type[LLMClient],
) -> None:
    history = InMemoryHistoryProvider()
    args = {"parcel": {"weight": 2, "fragile": None}, "options": {"express": True, "note": None},
            "to": {"street": "x", "zip": "12345"}, "copies": None, "tint": "red", "tags": None,
            "note": None}  # fmt: skip
    async with LLMServer() as server, client_class(server.url, "sk-test") as client:
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("ship", args, id="h1")]),
            Reply(text="Shipped."),
            Reply(text="Yes."),
            Reply(text="Yes."),
        )
        agent = Agent(client, tools=[ship, quote], history=history, instructions="Brief.")
        first = await agent.send("Ship it.")
        await agent.send("Done?")
        async with client_class(server.url, "sk-test") as other:
            saved = InMemoryHistoryProvider(list(history.messages)[:-2])
            fresh = Agent(other, tools=[ship, quote], history=saved, instructions="Brief.")
            await fresh.send("Done?")
    calls = [c for m in history.messages for c in m.tool_calls or ()]
    assert [(c.id, c.name, c.arguments) for c in calls] == [("h1", "ship", args)]
    result = json.loads(first.tool_messages[0].content)
    assert result["to"] == {"street": "x", "zip": "12345"}
    assert result["tint"] == "red"
    later, fresh_request = server.requests[2], server.requests[3]
    assert sent_calls(later) == {"h1": ("ship", args)}
    assert sent_results(later) == {"h1": first.tool_messages[0].content}
    assert fresh_request.json == later.json
    conversation = [ChatMessage.system("Brief."), *list(history.messages)[:-1]]
    expected = {
        "openai-chat": lambda: to_openai_chat(conversation),
        "anthropic": lambda: to_anthropic(conversation)[1],
        "openai-responses": lambda: to_responses_input(conversation),
    }[later.wire_format or ""]()
    assert later.messages == expected


@pytest.mark.asyncio
async def test_rich_turn_survives_the_provider_forms_and_back() -> None:
    args = {"legs": [{"origin": "OSL", "destination": "ROM"}], "passenger": {"name": "Ann",
            "age": None}, "seat": "aisle", "color": "red", "when": "2024-05-01", "count": 2,
            "bag": {"kilos": 7.5, "kind": "cabin"}, "meals": [{"vegan": True}],
            "at_time": "2024-05-01T10:00:00+02:00"}  # fmt: skip
    response, _ = await turn(
        AnthropicClient,
        [book],
        Reply(tool_calls=[ToolCallSpec("book", args, id="toolu_1")]),
        Reply(text="Booked."),
    )
    transcript = [ChatMessage.user("Go."), *response.turn_transcript]
    back = [ChatMessage.from_openai(m) for m in to_openai_chat(transcript)]
    assert back[1].tool_calls is not None
    assert back[1].tool_calls[0].arguments == args
    assert back[2].content == "booked"
    system, wire = to_anthropic(transcript)
    again = from_anthropic(system, wire)
    calls = [c for m in again for c in m.tool_calls or ()]
    assert [(c.id, c.name, c.arguments) for c in calls] == [("toolu_1", "book", args)]


@pytest.mark.asyncio
async def test_notebook_live_view_and_html_of_a_rich_turn_do_not_crash() -> None:
    out = io.StringIO()
    async with LLMServer() as server, OpenAIChatClient(server.url, "sk-test") as client:
        server.enqueue(
            Reply(
                reasoning="Quote first.",
                tool_calls=[
                    ToolCallSpec("quote", {"to": {"street": "<b>x</b>", "zip": "12345"},
                                           "parcel": {"weight": 1}, "options": {"express": True},
                                           "ship_on": "2024-05-01"}, id="q"),
                    ToolCallSpec("ship", {"parcel": {"weight": 0}, "options": {"express": True},
                                          "to": None, "copies": None, "tint": None,
                                          "tags": None, "note": None}, id="s"),
                ],
                chunk_size=3,
            ),
            Reply(text="Quoted <i>one</i>."),
        )  # fmt: skip
        results: list[Any] = []
        agent = Agent(client, tools=[quote, ship])
        view = live(agent.run("Go.").pipe(rx.do_action(results.append)), display=text_display(out))
        response = await view
    html = response_html(response)
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert "<b>x</b>" not in html
    assert all(isinstance(message_html(m), str) for m in response.turn_transcript)
    assert all(isinstance(result_html(r), str) for r in results)
    assert "Quoted <i>one</i>." in out.getvalue()
    errors = {m.tool_call_id: m.content for m in response.tool_messages}
    assert errors["s"].startswith("Error: invalid arguments for tool 'ship': argument 'parcel'")


@pytest.mark.asyncio
async def test_a_recorded_rich_turn_replays_equal_and_draws_a_timeline(tmp_path: Path) -> None:
    path = tmp_path / "turn.jsonl"
    items: list[Any] = []
    async with LLMServer() as server, OpenAIResponsesClient(server.url, "sk-test") as client:
        server.enqueue(
            Reply(tool_calls=[ToolCallSpec("label", {"parcel": {"weight": 2}}, id="l1"),
                              ToolCallSpec("label", {"parcel": {"weight": -2}}, id="l2")]),
            Reply(text="Labelled."),
        )  # fmt: skip
        agent = Agent(client, tools=[label])
        response = await collect_agent_response(
            recorder.record(agent.run("Go."), path).pipe(rx.do_action(items.append))
        )
    recording = recorder.load(path)
    assert recording.items == items
    assert [m.content for m in response.tool_messages] == [
        '{"weight": 2.0, "fragile": true}',
        "Error: invalid arguments for tool 'label': argument 'parcel': "
        "ValueError: weight must be positive",
    ]
    picture = timeline(recording)
    assert "label · l1" in picture.lanes
    assert "label · l2" in picture.lanes
    assert picture.svg.endswith("</svg>")


# ================================================================ definitions as JSON


class Size(enum.IntEnum):
    S = 1
    L = 3


@dataclasses.dataclass
class Defaults:
    color: Color = Color.RED
    pair: tuple[int, str] = (1, "a")
    day: datetime.date = datetime.date(2024, 1, 1)


class ModelDefaults(BaseModel):
    color: Color = Color.BLUE
    day: datetime.date = datetime.date(2024, 2, 2)
    size: Size = Size.L
    pair: tuple[int, int] = (1, 2)


def every_kind(
    model: ModelDefaults,
    record: Defaults,
    options: Options,
    color: Color = Color.BLUE,
    size: Size = Size.S,
    day: datetime.date = datetime.date(2024, 3, 3),
    at_time: datetime.datetime | None = None,
    pair: tuple[int, str] = (2, "b"),
    rest: tuple[float, ...] = (1.5,),
    choice: Literal["x", 2] = 2,
    field_enum: Color = Field(default=Color.RED, description="A color."),  # noqa: B008
    field_day: datetime.date = Field(default=datetime.date(2024, 4, 4)),  # noqa: B008
    bounded: Annotated[float, Field(gt=0, lt=1, multiple_of=0.25)] = 0.5,
    words: Annotated[list[str], at.Len(1, 3)] = ("a",),  # type: ignore[assignment]
) -> str:
    """Every kind of parameter."""
    return ""


def test_definitions_of_every_parameter_kind_are_json() -> None:
    plain = tool(every_kind)
    for form in (plain.to_openai(), plain.to_responses(), plain.to_anthropic()):
        assert json.loads(json.dumps(form, allow_nan=False)) == form
    properties = plain.parameters["properties"]
    assert properties["color"]["default"] == "blue"
    assert properties["size"]["default"] == 1
    assert properties["pair"]["default"] == [2, "b"]
    assert properties["rest"]["default"] == [1.5]
    assert properties["field_enum"]["default"] == "red"
    assert properties["words"]["default"] == ["a"]
    assert properties["record"]["properties"]["color"]["default"] == "red"
    assert properties["record"]["properties"]["pair"]["default"] == [1, "a"]
    assert properties["model"]["properties"]["day"]["default"] == "2024-02-02"
    # OpenAI's strict mode has no fixed-length tuples ("array schema missing items"):
    # refused at once, naming the parameter
    with pytest.raises(TypeError, match="no fixed-length tuples"):
        tool(every_kind, strict=True)


# ================================================================ concurrency and approvals


class Job(BaseModel):
    n: int = Field(ge=0)
    tags: list[str] = []


class Done(BaseModel):
    n: int
    doubled: int


@pytest.mark.asyncio
async def test_many_concurrent_calls_with_pydantic_conversion(
    client_class: type[LLMClient],
) -> None:
    lock = threading.Lock()
    running = peak = 0

    @tool
    def work(job: Job) -> Done:
        """Do a job."""
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return Done(n=job.n, doubled=2 * job.n)

    calls = [ToolCallSpec("work", {"job": {"n": i, "tags": [str(i)]}}, id=f"c{i}")
             for i in range(30)]  # fmt: skip
    calls.insert(7, ToolCallSpec("work", {"job": {"n": -1}}, id="neg"))
    response, requests = await turn(
        client_class, [work], Reply(tool_calls=calls, chunk_size=50), Reply(text="All done."),
        concurrency=4,
    )  # fmt: skip
    assert peak == 4
    results = sent_results(requests[1])
    assert list(results) == [c.id for c in calls]  # call order
    assert results["neg"] == (
        "Error: invalid arguments for tool 'work': argument 'job.n': "
        "expected at least 0, got integer -1"
    )
    assert all(json.loads(results[f"c{i}"]) == {"n": i, "doubled": 2 * i} for i in range(30))
    assert response.text == "All done."


@pytest.mark.asyncio
async def test_approver_sees_the_raw_arguments_and_is_never_asked_for_invalid_ones(
    client_class: type[LLMClient],
) -> None:
    asked: list[tuple[str, Any]] = []
    ran: list[Address] = []

    @tool(requires_approval=True, strict=True)
    def send_to(to: Address, urgent: bool = False) -> str:
        """Send something."""
        ran.append(to)
        return f"sent urgent={urgent}"

    def approver(event: ToolApprovalRequestEvent) -> bool:
        asked.append((event.call_id, event.arguments))
        return bool(event.arguments["to"]["zip"] != "99999")

    good = {"to": {"street": "a", "zip": "12345"}, "urgent": None}
    _, requests = await turn(
        client_class,
        [send_to],
        Reply(
            tool_calls=[
                ToolCallSpec("send_to", good, id="ok"),
                ToolCallSpec("send_to", {"to": {"street": "a", "zip": "99999"}, "urgent": True},
                             id="no"),
                ToolCallSpec("send_to", {"to": {"street": "a", "zip": "x"}, "urgent": None},
                             id="bad"),
            ]
        ),
        Reply(text="Ok."),
        approver=approver,
    )  # fmt: skip
    assert sorted(asked, key=lambda a: a[0]) == [
        ("no", {"to": {"street": "a", "zip": "99999"}, "urgent": True}),
        ("ok", good),
    ]
    assert ran == [Address(street="a", zip="12345")]
    results = sent_results(requests[1])
    assert results["ok"] == "sent urgent=False"
    assert results["no"] == "Error: the user denied the call to tool 'send_to'; it was not run"
    assert results["bad"].startswith(
        "Error: invalid arguments for tool 'send_to': argument 'to.zip'"
    )


# ================================================================ clients


@pytest.mark.asyncio
async def test_anthropic_base_urls_with_and_without_a_gateway_prefix() -> None:
    async with LLMServer() as server:
        for base in (server.url, server.url + "/", server.url + "/v1", server.url + "/v1/"):
            async with AnthropicClient(base, "sk-ant") as client:
                response = await Agent(client, tools=[label]).send("Hi")
            assert response.text == "Hello from the rafrx test server!"
            assert server.requests[-1].path == "/v1/messages"
        async with AnthropicClient(server.url + "/gateway/anthropic", "sk-ant") as client:
            with pytest.raises(HTTPStatusError) as caught:
                await Agent(client).send("Hi")
        assert caught.value.status == 404
        assert server.requests[-1].path == "/gateway/anthropic/v1/messages"
        assert server.requests[-1].headers["x-api-key"] == "***"


@pytest.mark.asyncio
async def test_credential_headers_are_redacted_by_name_in_errors_and_records() -> None:
    from rafrx.testing import Fault

    secret = "gw-secret-0123456789"
    async with LLMServer() as server:
        server.enqueue(Fault.status(401, message=f"bad token {secret}"), Reply(text="Fine."))
        headers = {"cf-aig-authorization": f"Bearer {secret}", "X-Title": "my app"}
        async with OpenAIChatClient(server.url, headers=headers) as client:
            with pytest.raises(HTTPStatusError) as caught:
                await Agent(client, tools=[label]).send("Hi")
            assert secret not in str(caught.value)
            assert secret not in str(caught.value.body)
            assert secret not in repr(client)
            assert (await Agent(client).send("Hi")).text == "Fine."
    recorded = server.requests[-1].headers
    assert recorded["cf-aig-authorization"] == "Bearer ***"
    assert recorded["X-Title"] == "my app"


@pytest.mark.asyncio
async def test_trust_env_sends_through_the_environment_proxy_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with LLMServer() as target, LLMServer() as proxy:
        for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("http_proxy", proxy.url)
        async with OpenAIChatClient(target.url, "sk-test") as direct:
            await Agent(direct).send("Hi")
        assert (len(target.requests), len(proxy.requests)) == (1, 0)
        async with OpenAIChatClient(target.url, "sk-test", trust_env=True) as proxied:
            await Agent(proxied).send("Hi")
        assert (len(target.requests), len(proxy.requests)) == (1, 1)
        assert proxy.requests[0].path == "/v1/chat/completions"


# ================================================================ bugs in validation


@pytest.mark.asyncio
async def test_a_date_bound_on_a_parameter_is_enforced() -> None:
    seen: list[datetime.date] = []

    @tool
    def since(start: Annotated[datetime.date, Field(ge=datetime.date(2024, 1, 1))]) -> str:
        """Orders since a date."""
        seen.append(start)
        return "orders"

    _, requests = await turn(
        AnthropicClient,
        [since],
        Reply(tool_calls=[ToolCallSpec("since", {"start": "1999-12-31"}, id="s")]),
        Reply(text="None."),
    )
    assert seen == []
    assert sent_results(requests[1])["s"].startswith(
        "Error: invalid arguments for tool 'since': argument 'start'"
    )


@pytest.mark.asyncio
async def test_every_problem_of_a_nested_model_argument_is_reported() -> None:
    _, requests = await turn(
        OpenAIChatClient,
        [quote],
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "quote",
                    {"to": {"zip": "1"}, "parcel": {}, "options": {}, "ship_on": "2024-05-01"},
                    id="q",
                )
            ]
        ),
        Reply(text="Hm."),
    )
    error = sent_results(requests[1])["q"]
    for problem in (
        "missing required argument 'to.street'",
        "argument 'to.zip'",
        "missing required argument 'parcel.weight'",
        "missing required argument 'options.express'",
    ):
        assert problem in error, error
