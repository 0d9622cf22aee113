"""``slot_init``: the same objects as attrs' own ``__init__``, or a refusal."""

from __future__ import annotations

import inspect
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.bench_init import attrs_twin
from rafrx import content, response, updates
from rafrx._slot_init import slot_builder, slot_init
from rafrx.operators import _builders
from rafrx.sources.dialects._common import reasoning_delta, text_delta, tool_call_args
from rafrx.sources.dialects.openai_chat import _tool_call_delta as tool_call_delta
from rafrx.sse import ServerSentEvent
from rafrx.sse import _make_event as make_event

# Built once per cut call, not per chunk, and its ``error`` defaults from its
# ``finish_reason`` (an attrs Factory taking self, which slot_init refuses).
NOT_PER_CHUNK = {content.ToolCallIncompleteContent}

STREAMED = [
    cls
    for module in (updates, content)
    for cls in (getattr(module, name) for name in module.__all__)
    if inspect.isclass(cls) and attrs.has(cls) and cls not in NOT_PER_CHUNK
] + [response.AgentResponseResult]


@pytest.mark.parametrize("cls", STREAMED, ids=lambda c: c.__name__)
def test_every_streamed_class_stores_through_its_slots(cls: type) -> None:
    assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"
    assert "_store_0" in cls.__init__.__code__.co_names  # slot_init's, not attrs' own
    assert _parameters(cls) == _parameters(attrs_twin(cls))


def _parameters(cls: type) -> list[tuple[str, Any, Any]]:
    params = inspect.signature(cls).parameters.values()
    return [(p.name, p.kind, p.default) for p in params]


@pytest.mark.parametrize("cls", STREAMED, ids=lambda c: c.__name__)
def test_built_objects_equal_attrs_own(cls: type) -> None:
    plain = attrs_twin(cls)
    required = [p for p in inspect.signature(cls).parameters.values() if p.default is p.empty]
    args = [1 if p.name == "index" else f"v{k}" for k, p in enumerate(required)]
    try:
        expected = attrs.asdict(plain(*args), recurse=False)
    except (TypeError, ValueError) as exc:  # e.g. a validator rejecting the sample
        with pytest.raises(type(exc)):
            cls(*args)
        return
    assert attrs.asdict(cls(*args), recurse=False) == expected


@slot_init
@attrs.frozen
class _Sample:
    a: int
    b: str = "b"
    c: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    d: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    e: Any = attrs.field(default=None, kw_only=True)


_PlainSample = attrs_twin(_Sample)
_SAMPLE_FIELDS = {  # strategies for _Sample's a..e (d sometimes fails its validator)
    "a": st.integers(),
    "b": st.text(max_size=5),
    "c": st.lists(st.integers(), max_size=3),
    "d": st.integers(min_value=-2, max_value=2),
    "e": st.none() | st.integers(),
}


@given(**_SAMPLE_FIELDS)
def test_defaults_converters_validators_and_keywords_behave_as_attrs(
    a: int, b: str, c: list[int], d: int, e: Any
) -> None:
    def build(cls: Any) -> Any:
        try:
            return attrs.asdict(cls(a, b, c, d, e=e), recurse=False)
        except ValueError as exc:
            return type(exc)

    assert build(_Sample) == build(_PlainSample)
    assert attrs.asdict(_Sample(a)) == attrs.asdict(_PlainSample(a))


@given(**_SAMPLE_FIELDS)
def test_a_builder_builds_what_the_class_call_builds(
    a: int, b: str, c: list[int], d: int, e: Any
) -> None:
    def build(make: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return make(*args, **kwargs)
        except ValueError as exc:
            return type(exc)

    built = build(slot_builder(_Sample), a, b, c, d, e)
    assert built == build(_Sample, a, b, c, d, e=e)
    if not isinstance(built, type):
        assert type(built) is _Sample
        assert built.c == tuple(c)  # converted, as by __init__


def test_a_builder_honours_disabled_validators_and_takes_every_field() -> None:
    build = slot_builder(_Sample)
    attrs.validators.set_disabled(True)
    try:
        assert build(1, "b", (), -1, None).d == -1
    finally:
        attrs.validators.set_disabled(False)
    with pytest.raises(ValueError, match="d"):
        build(1, "b", (), -1, None)
    with pytest.raises(TypeError):
        build(1)  # no defaults: every field, in order


@pytest.mark.parametrize("name", _builders.__all__)
def test_each_per_chunk_builder_builds_its_class(name: str) -> None:
    build = getattr(_builders, name)
    cls = build.__qualname__.split(".")[0]
    fields = attrs.fields(getattr(content if hasattr(content, cls) else response, cls))
    args = [(f"v{k}",) for k in range(len(fields))]  # (tuples: AgentResponseResult converts)
    built = build(*args)
    assert type(built).__name__ == cls
    assert [getattr(built, f.name) for f in fields] == args
    keyword = {f.name: a for f, a in zip(fields, args, strict=True) if f.kw_only}
    positional = [a for f, a in zip(fields, args, strict=True) if not f.kw_only]
    assert built == type(built)(*positional, **keyword)


def test_the_class_stays_frozen_hashable_and_evolvable() -> None:
    sample = _Sample(1, c=[2])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        sample.a = 2  # type: ignore[misc]
    assert hash(sample) == hash(_Sample(1, c=(2,)))
    assert attrs.evolve(sample, b="x") == _Sample(1, "x", (2,))
    assert not hasattr(sample, "__dict__")


def test_disabled_validators_are_honoured() -> None:
    attrs.validators.set_disabled(True)
    try:
        assert _Sample(1, d=-1).d == -1
    finally:
        attrs.validators.set_disabled(False)
    with pytest.raises(ValueError, match="d"):
        _Sample(1, d=-1)


def _factory(apply: Any = slot_init) -> None:
    @attrs.frozen
    class WithFactory:
        a: list[int] = attrs.Factory(list)

    apply(WithFactory)


def _not_init(apply: Any = slot_init) -> None:
    @attrs.frozen
    class NotInit:
        a: int = attrs.field(default=0, init=False)

    apply(NotInit)


def _post_init(apply: Any = slot_init) -> None:
    @attrs.frozen
    class PostInit:
        a: int

        def __attrs_post_init__(self) -> None:
            pass

    apply(PostInit)


def _no_slots(apply: Any = slot_init) -> None:
    @attrs.frozen(slots=False)
    class NoSlots:
        a: int

    apply(NoSlots)


def _alias(apply: Any = slot_init) -> None:
    @attrs.frozen
    class Alias:
        a: int = attrs.field(alias="b")

    apply(Alias)


def _converter_taking_self(apply: Any = slot_init) -> None:
    @attrs.frozen
    class Scaled:
        factor: int = 1
        value: int = attrs.field(
            default=0, converter=attrs.Converter(lambda v, self: v * self.factor, takes_self=True)
        )

    apply(Scaled)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_converter_taking_self, "value uses a converter taking the instance"),
        (_factory, "default factory"),
        (_not_init, "init=False"),
        (_post_init, "__attrs_post_init__"),
        (_no_slots, "not a slotted attrs class"),
        (_alias, "alias"),
    ],
)
def test_what_it_cannot_reproduce_is_refused(make: Any, reason: str) -> None:
    with pytest.raises(TypeError, match=reason):
        make()
    with pytest.raises(TypeError, match=reason):  # slot_builder has the same limits
        make(slot_builder)


@pytest.mark.parametrize(
    ("build", "cls", "args"),
    [
        (text_delta, updates.TextDelta, ("Hi",)),
        (reasoning_delta, updates.ReasoningDelta, ("Hm", ("kept", "block"))),
        (tool_call_args, updates.ToolCallArgs, ("c1", '{"a"')),
        (tool_call_delta, updates.ToolCallDelta, (0, "c1", "add", '{"a"')),
        (make_event, ServerSentEvent, ("message", '{"n": 1}', "7", None)),
    ],
)
def test_each_per_event_builder_builds_its_class(
    build: Any, cls: type, args: tuple[Any, ...]
) -> None:
    """The dialects' and the SSE decoder's builders make exactly what the class call makes."""
    built = build(*args)
    assert type(built) is cls
    fields = attrs.fields(cls)
    keyword = {f.name: a for f, a in zip(fields, args, strict=True) if f.kw_only}
    positional = [a for f, a in zip(fields, args, strict=True) if not f.kw_only]
    assert built == cls(*positional, **keyword)
    assert hash(built) == hash(cls(*positional, **keyword))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(built, fields[0].name, args[0])
