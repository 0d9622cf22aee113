"""Construction cost of the objects a stream builds per chunk, with and without ``slot_init``.

Run ``python -m bench.bench_init``. For each class a copy with attrs' own
generated ``__init__`` is made (same fields, defaults, converters and
validators), and both are timed building the same arguments with
:mod:`timeit` (best of 7 repeats). ``slot_init`` stores each field through
its slot descriptor instead of ``object.__setattr__`` by name.

Example:
    >>> rows = measure(number=200, repeat=1)
    >>> [name for name, *_ in rows][:2]
    ['ToolCallDelta', 'ToolCallArgsContent']
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
from rafrx.response import AgentResponseResult

__all__ = ["attrs_twin", "measure"]

_META = c.ResponseMetadata("resp_1", "gpt")
CASES: list[tuple[type, Callable[[Any], object]]] = [
    (u.ToolCallDelta, lambda cls: cls(1, None, None, '{"ci')),
    (c.ToolCallArgsContent, lambda cls: cls("call_1", '{"ci', meta=_META)),
    (c.ToolCallArgsProgressContent, lambda cls: cls("call_1", "city", 5, "Paris", meta=_META)),
    (AgentResponseResult, lambda cls: cls("resp_1", "gpt", None, (_META,), ())),
    (c.TextContent, lambda cls: cls("Hello", meta=_META)),
]


def attrs_twin(cls: type) -> Any:
    """A copy of ``cls`` built by attrs alone: same fields, attrs' own ``__init__``."""
    these = {
        f.name: attrs.field(
            default=f.default, validator=f.validator, converter=f.converter, kw_only=f.kw_only
        )
        for f in attrs.fields(cls)
    }
    return attrs.make_class(cls.__name__, these, frozen=True, slots=True)


def measure(number: int = 200_000, repeat: int = 7) -> list[tuple[str, float, float]]:
    """``(class, attrs ns, slot_init ns)`` per object, best of ``repeat``."""
    rows = []
    for cls, build in CASES:
        plain = attrs_twin(cls)
        times = [
            min(timeit.repeat(functools.partial(build, k), number=number, repeat=repeat))
            / number
            * 1e9
            for k in (plain, cls)
        ]
        rows.append((cls.__name__, times[0], times[1]))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Print a Markdown table of construction times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args(argv)
    print("| class | attrs' __init__ ns | slot_init ns | ratio |")
    print("| --- | --- | --- | --- |")
    for name, plain, fast in measure(args.number):
        print(f"| {name} | {plain:.0f} | {fast:.0f} | {fast / plain:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
