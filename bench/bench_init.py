"""Construction cost of the objects a stream builds per chunk, three ways.

Run ``python -m bench.bench_init``. For each class a copy with attrs' own
generated ``__init__`` is made (same fields, defaults, converters and
validators), and it, the class itself (``slot_init``: each field stored
through its slot descriptor instead of ``object.__setattr__`` by name) and
its ``slot_builder`` (every field positionally: no keyword argument to
match) are timed building the same object with :mod:`timeit` (best of 7
repeats).

Example:
    >>> rows = measure(number=200, repeat=1)
    >>> [name for name, *_ in rows][:2]
    ['ToolCallDelta', 'ToolCallArgsContent']
    >>> len(rows[0])
    4
"""

from __future__ import annotations

import argparse
import functools
import timeit
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rafrx import content as c
from rafrx import updates as u
from rafrx._slot_init import slot_builder
from rafrx.response import AgentResponseResult

__all__ = ["attrs_twin", "measure"]

_META = c.ResponseMetadata("resp_1", "gpt")
CASES: list[tuple[type, tuple[Any, ...], dict[str, Any]]] = [
    (u.ToolCallDelta, (1, None, None, '{"ci'), {}),
    (c.ToolCallArgsContent, ("call_1", '{"ci'), {"meta": _META}),
    (c.ToolCallArgsProgressContent, ("call_1", "city", 5, "Paris"), {"meta": _META}),
    (AgentResponseResult, ("resp_1", "gpt", None, (_META,), ()), {}),
    (c.TextContent, ("Hello",), {"meta": _META}),
]
"""(class, positional arguments, keyword arguments): the builder takes both, in order."""


def attrs_twin(cls: type) -> Any:
    """A copy of ``cls`` built by attrs alone: same fields, attrs' own ``__init__``."""
    these = {
        f.name: attrs.field(
            default=f.default, validator=f.validator, converter=f.converter, kw_only=f.kw_only
        )
        for f in attrs.fields(cls)
    }
    return attrs.make_class(cls.__name__, these, frozen=True, slots=True)


def measure(number: int = 200_000, repeat: int = 7) -> list[tuple[str, float, float, float]]:
    """``(class, attrs ns, slot_init ns, slot_builder ns)`` per object, best of ``repeat``."""
    rows = []
    for cls, args, kwargs in CASES:
        calls: list[Callable[[], object]] = [
            functools.partial(attrs_twin(cls), *args, **kwargs),
            functools.partial(cls, *args, **kwargs),
            functools.partial(slot_builder(cls), *args, *kwargs.values()),
        ]
        ns = [min(timeit.repeat(k, number=number, repeat=repeat)) / number * 1e9 for k in calls]
        rows.append((cls.__name__, ns[0], ns[1], ns[2]))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Print a Markdown table of construction times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args(argv)
    print("| class | attrs' __init__ ns | slot_init ns | slot_builder ns |")
    print("| --- | --- | --- | --- |")
    for name, plain, init, builder in measure(args.number):
        cells = [f"{plain:.0f}", *(f"{ns:.0f} ({ns / plain:.2f})" for ns in (init, builder))]
        print(f"| {name} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
