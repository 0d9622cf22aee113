"""A faster ``__init__`` for the frozen attrs classes built once per chunk.

attrs' generated ``__init__`` of a frozen slotted class stores each field
with ``object.__setattr__`` (the class's own ``__setattr__`` raises), which
looks the name up in the class on every store. :func:`slot_init` replaces it
with one that stores through each slot's descriptor directly: the same
instance, 15 to 20% faster to build (``python -m bench.bench_init``). A
stream builds several such objects per chunk, so this is a measurable share
of rafrx's per-chunk cost.

:func:`slot_builder` makes a function that builds the same instance from
every field passed positionally, for the hottest call sites: a keyword
argument (the contents' ``meta``) makes a class call take a third longer.

The replacement keeps attrs' signature, defaults, converters and validators
(honouring :func:`attrs.validators.set_disabled`). A class using what it does
not reproduce (factories, ``init=False``, aliases, ``__attrs_pre_init__`` /
``__attrs_post_init__``, converters taking the instance) is refused when it is
decorated, so attrs' behaviour is never silently changed.

Example:
    >>> import attrs
    >>> @slot_init
    ... @attrs.frozen
    ... class Point:
    ...     x: int
    ...     y: int = 0
    >>> Point(1), Point(1) == Point(x=1, y=0)
    (Point(x=1, y=0), True)
    >>> Point(1).x = 2
    Traceback (most recent call last):
    attr.exceptions.FrozenInstanceError: can't set attribute
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import attrs

__all__ = ["slot_builder", "slot_init"]

T = TypeVar("T")


def slot_init(cls: type[T]) -> type[T]:
    """Give the slotted attrs class ``cls`` an ``__init__`` that stores through its slots.

    Raises:
        TypeError: ``cls`` is not a slotted attrs class, or uses a feature the
            replacement does not reproduce.
    """
    code = _Stores(cls)
    params = ", ".join(["self", *code.positional, *(["*", *code.keyword] if code.keyword else [])])
    init = code.function("__init__", params)
    init.__annotations__ = dict(getattr(cls.__init__, "__annotations__", {}))
    # typing.get_type_hints() resolves the annotations in the globals of what it
    # unwraps to: attrs' __init__ (the same signature), not the namespace above.
    init.__wrapped__ = cls.__init__
    setattr(cls, "__init__", init)  # noqa: B010 (mypy forbids assigning a method)
    return cls


def slot_builder(cls: type[T]) -> Callable[..., T]:
    """A function building ``cls`` from every field, positionally, in field order.

    It builds the same object as ``cls(...)`` (converters and validators
    apply), without the class call: no keyword argument to match. And it
    stores the fields more cheaply than ``__init__`` can: it makes the object
    as an instance of a private subclass of ``cls`` with the same layout and
    Python's own ``__setattr__`` (so each field is a plain slot store, not a
    descriptor call), then gives it its class, ``cls``, before the validators
    run. A content of three to five fields takes a third to a half of the
    instructions its class call does (``python -m bench.bench_init``). Where
    that subclass cannot take the object's class (a Python that refuses the
    assignment), the fields go through their slot descriptors, as in
    :func:`slot_init`. Annotate the result with the signature you call it with.

    Example:
        >>> @attrs.frozen
        ... class Tagged:
        ...     text: str
        ...     tag: str = attrs.field(default="", kw_only=True)
        >>> build = slot_builder(Tagged)
        >>> build("hi", "t") == Tagged("hi", tag="t"), type(build("hi", "t")) is Tagged
        (True, True)

    Raises:
        TypeError: as :func:`slot_init`.
    """
    code = _Stores(cls)
    code.namespace["_new"] = object.__new__
    code.namespace["_cls"] = cls
    params = ", ".join(f.name for f in attrs.fields(cast(Any, cls)))
    twin = _mutable_twin(cls)
    if twin is None:
        build = code.function("build", params, first="self = _new(_cls)", last="return self")
    else:
        code.namespace["_twin"] = twin
        code.stores = [*code.plain_stores, "    self.__class__ = _cls"]
        build = code.function("build", params, first="self = _new(_twin)", last="return self")
    return cast("Callable[..., T]", build)


def _mutable_twin(cls: type) -> type | None:
    """A subclass of ``cls`` adding nothing but Python's own ``__setattr__`` and
    ``__delattr__``, whose instances can be given the class ``cls``; None if this
    Python refuses that."""
    try:
        twin = type(
            cls.__name__,
            (cls,),
            {
                "__slots__": (),
                "__setattr__": object.__setattr__,
                "__delattr__": object.__delattr__,
                "__module__": cls.__module__,
                "__qualname__": f"{cls.__qualname__}.<builder>",
            },
        )
        probe: Any = object.__new__(twin)
        probe.__class__ = cls
    except TypeError:
        return None
    return twin


class _Stores:
    """The source of a function storing each field of ``cls`` through its slot."""

    def __init__(self, cls: type) -> None:
        klass: Any = cls  # attrs.has() would narrow cls itself to type[AttrsInstance]
        if not attrs.has(klass) or "__slots__" not in vars(cls):
            raise TypeError(f"{cls.__name__} is not a slotted attrs class")
        for hook in ("__attrs_pre_init__", "__attrs_post_init__"):
            if hasattr(cls, hook):
                raise TypeError(f"{cls.__name__} has {hook}")
        if any("_attrs_cached_hash" in vars(c).get("__slots__", ()) for c in cls.__mro__):
            raise TypeError(f"{cls.__name__} caches its hash (cache_hash=True)")
        self.cls = cls
        self.namespace: dict[str, Any] = {"_validators_disabled": attrs.validators.get_disabled}
        self.positional: list[str] = []  # __init__'s parameters, with their defaults
        self.keyword: list[str] = []
        self.stores: list[str] = []  # each field through its slot descriptor
        self.plain_stores: list[str] = []  # each field by attribute (a mutable twin's)
        self.checks: list[str] = []
        for k, field in enumerate(attrs.fields(klass)):
            _check_supported(cls, field)
            name = field.name
            slot = next(vars(c)[name] for c in cls.__mro__ if name in vars(c))  # (or a base's)
            self.namespace[f"_store_{k}"] = slot.__set__
            param = name
            if field.default is not attrs.NOTHING:
                self.namespace[f"_default_{k}"] = field.default
                param = f"{name}=_default_{k}"
            (self.keyword if field.kw_only else self.positional).append(param)
            value = name
            if field.converter is not None:
                self.namespace[f"_convert_{k}"] = field.converter
                value = f"_convert_{k}({name})"
            self.stores.append(f"    _store_{k}(self, {value})")
            self.plain_stores.append(f"    self.{name} = {value}")
            if field.validator is not None:
                self.namespace[f"_validate_{k}"] = field.validator
                self.namespace[f"_field_{k}"] = field
                self.checks.append(f"        _validate_{k}(self, _field_{k}, self.{name})")

    def function(self, name: str, params: str, first: str = "", last: str = "") -> Any:
        """``def name(params)``: the line ``first``, the stores and checks, the line ``last``."""
        lines = [f"def {name}({params}):", f"    {first}", *self.stores]
        if self.checks:
            lines += ["    if not _validators_disabled():", *self.checks]
        lines.append(f"    {last or 'pass'}")
        exec("\n".join(lines), self.namespace)  # attrs builds its own __init__ the same way
        function = self.namespace[name]
        function.__qualname__ = f"{self.cls.__qualname__}.{name}"
        function.__module__ = self.cls.__module__
        return function


def _check_supported(cls: type, field: attrs.Attribute[Any]) -> None:
    unsupported = None
    if not field.init:
        unsupported = "init=False"
    elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
        unsupported = "a default factory"
    elif field.alias != field.name:
        unsupported = "an alias"
    elif isinstance(field.converter, attrs.Converter):
        unsupported = "a converter taking the instance"
    if unsupported is not None:
        raise TypeError(f"{cls.__name__}.{field.name} uses {unsupported}")
