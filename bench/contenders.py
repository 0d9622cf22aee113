"""The contenders: who is measured on which scenario.

Each one is a function ``(chunks, dialect) -> Outcome``; the registry says
which scenarios it applies to and, when its package is missing, why it is
skipped (the run goes on without it).

Example:
    >>> [c.key for c in CONTENDERS][:3]
    ['limit-json', 'limit-orjson', 'rafrx']
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable

import attrs

from bench import peers
from bench.generate import Scenario
from bench.limit import limit_anthropic, limit_openai_chat
from bench.outcome import Outcome

__all__ = ["CONTENDERS", "Contender", "applicable"]

Runner = Callable[[Iterable[bytes], str], Outcome]


def _limit(chunks: Iterable[bytes], dialect: str, *, orjson: bool = False) -> Outcome:
    if orjson:
        import orjson as _orjson

        loads = _orjson.loads
    else:
        import json

        loads = json.loads
    if dialect == "openai-chat":
        return limit_openai_chat(chunks, loads)
    return limit_anthropic(chunks, loads)


def _rafrx(chunks: Iterable[bytes], dialect: str) -> Outcome:
    from bench.rafrx_pipeline import run_rafrx

    return run_rafrx(chunks, dialect)


def _missing_orjson() -> str | None:
    try:
        import orjson  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        return f"orjson not installed ({exc})"
    return None


@attrs.frozen
class Contender:
    """One way of turning the bytes into an :class:`Outcome`."""

    key: str
    label: str
    run: Runner
    applies: Callable[[Scenario], bool]
    missing: str | None = None
    """Why it cannot run here (package not installed), else ``None``."""
    prepare: Callable[[], object] | None = None
    """Imports what :attr:`run` needs, so that no timed run pays for it."""
    capped: bool = True
    """Whether a run may be stopped at the runner's cap. The limit loops and
    rafrx always run to the end: every ratio is taken against them; so do
    ``ChatCompletionStreamState`` and the jiter re-parse, whose times a target
    compares with rafrx's (at 1 MB too)."""


def _all(_: Scenario) -> bool:
    return True


def _chat(s: Scenario) -> bool:
    return s.dialect == "openai-chat"


def _anthropic(s: Scenario) -> bool:
    return s.dialect == "anthropic"


def _arguments(s: Scenario) -> bool:
    return s.kind in ("tools", "args")


CONTENDERS: tuple[Contender, ...] = (
    Contender("limit-json", "stdlib limit loop (json)", _limit, _all, capped=False),
    Contender(
        "limit-orjson",
        "limit loop (orjson)",
        functools.partial(_limit, orjson=True),
        _all,
        _missing_orjson(),
        functools.partial(importlib.import_module, "orjson"),
        capped=False,
    ),
    Contender(
        "rafrx",
        "rafrx from_sse→convert→aggregate",
        _rafrx,
        _all,
        None,
        functools.partial(importlib.import_module, "bench.rafrx_pipeline"),
        capped=False,
    ),
    Contender(
        "openai",
        "openai ChatCompletionStreamState",
        peers.run_openai_state,
        _chat,
        peers.MISSING.get("openai"),
        functools.partial(peers.prepare, "openai"),
        capped=False,  # a target compares it with rafrx on every scenario, 1 MB (~40 s) included
    ),
    Contender(
        "anthropic",
        "anthropic accumulate_event",
        peers.run_anthropic_accumulate,
        _anthropic,
        peers.MISSING.get("anthropic"),
        functools.partial(peers.prepare, "anthropic"),
    ),
    Contender(
        "langchain",
        "langchain-core AIMessageChunk +",
        peers.run_langchain,
        _all,
        peers.MISSING.get("langchain"),
        functools.partial(peers.prepare, "langchain"),
    ),
    Contender(
        "jiter",
        "limit + jiter partial re-parse per delta",
        peers.run_jiter_reparse,
        _arguments,
        peers.MISSING.get("jiter"),
        functools.partial(peers.prepare, "jiter"),
        capped=False,  # its 1 MB run (~40 s) is what a target is about: measured, not bounded
    ),
)
"""Every contender, the stdlib limit loop first (everything is a ratio to it)."""


def applicable(scenario: Scenario, only: Iterable[str] | None = None) -> list[Contender]:
    """The installed contenders that apply to ``scenario`` (optionally only ``only`` keys)."""
    keys = set(only) if only is not None else None
    return [
        c
        for c in CONTENDERS
        if c.missing is None and c.applies(scenario) and (keys is None or c.key in keys)
    ]
