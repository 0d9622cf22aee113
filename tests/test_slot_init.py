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
from rafrx._slot_init import slot_init

STREAMED = [
    cls
    for module in (updates, content)
    for cls in (getattr(module, name) for name in module.__all__)
    if inspect.isclass(cls) and attrs.has(cls)
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


@given(
    a=st.integers(),
    b=st.text(max_size=5),
    c=st.lists(st.integers(), max_size=3),
    d=st.integers(min_value=-2, max_value=2),
    e=st.none() | st.integers(),
)
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


def _factory() -> None:
    @attrs.frozen
    class WithFactory:
        a: list[int] = attrs.Factory(list)

    slot_init(WithFactory)


def _not_init() -> None:
    @attrs.frozen
    class NotInit:
        a: int = attrs.field(default=0, init=False)

    slot_init(NotInit)


def _post_init() -> None:
    @attrs.frozen
    class PostInit:
        a: int

        def __attrs_post_init__(self) -> None:
            pass

    slot_init(PostInit)


def _no_slots() -> None:
    @attrs.frozen(slots=False)
    class NoSlots:
        a: int

    slot_init(NoSlots)


def _alias() -> None:
    @attrs.frozen
    class Alias:
        a: int = attrs.field(alias="b")

    slot_init(Alias)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
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
