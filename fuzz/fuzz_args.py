"""Coverage-guided fuzzing of the streaming tool-argument parser (atheris).

Each input is a text (tool-call arguments as the model streams them) and cut
points. Checked:

* :class:`~rafrx.json_stream.StreamingArgsParser` never raises while fed;
  ``close()`` returns ``json.loads(text)`` exactly when that succeeds, and
  raises ``json.JSONDecodeError`` otherwise;
* each string member's ``ArgProgress`` fragments join to its value, and
  ``received`` is their UTF-8 length so far;
* a second parser that takes each piece with ``grow()`` where it can, and
  ``feed()`` otherwise, reports the same events and ends the same way;
* every ``ArgMember`` it reports for an object equals that member of
  ``json.loads(text)`` (for objects without duplicate keys);
* the operator pipeline (``convert()``) never raises: the call is flushed with
  the parsed arguments, or with ``error`` set and the text kept.

Run (see ``fuzz/README.md``)::

    python fuzz/fuzz_args.py -max_total_time=300 fuzz/corpus/args
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from typing import Any

import atheris

with atheris.instrument_imports():
    import reactivex

    from rafrx import operators as ops
    from rafrx import updates as u
    from rafrx.content import ToolCallingContent
    from rafrx.json_stream import ArgMember, ArgProgress, StreamingArgsParser
    from rafrx.response import FinishReason


def loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def same(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN (json.loads accepts NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def check_progress(event: ArgMember | ArgProgress, grown: str) -> str:
    """The string value grown so far, after ``event``; raises if the event disagrees."""
    if isinstance(event, ArgProgress):
        grown += event.fragment
        if event.received != len(grown.encode("utf-8", "surrogatepass")):
            raise AssertionError(f"received {event.received} after {grown!r}")
        return grown
    if isinstance(event.value, str) and event.value != grown:
        raise AssertionError(f"member {event.name!r} is {event.value!r}, grew {grown!r}")
    return ""


def check(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    cuts = [fdp.ConsumeIntInRange(0, 4096) for _ in range(fdp.ConsumeIntInRange(0, 12))]
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    points = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(points)]

    parser = StreamingArgsParser()
    grower = StreamingArgsParser()
    members: list[ArgMember] = []
    grown_text = ""
    for piece in pieces:
        events = parser.feed(piece)
        grown = grower.grow(piece)
        if repr(events) != repr(grower.feed(piece) if grown is None else [ArgProgress(*grown)]):
            raise AssertionError(f"grow() and feed() disagree on {piece!r} of {text!r}")
        members += [e for e in events if isinstance(e, ArgMember)]
        for event in events:
            grown_text = check_progress(event, grown_text)
    if grower.error != parser.error:
        raise AssertionError(f"grow() and feed() end differently on {text!r}")
    ok, value = loads(text)
    if ok:
        if not same(parser.close(), value) or not same(grower.close(), value):
            raise AssertionError(f"close() disagrees with json.loads for {text!r}")
        if isinstance(value, dict) and len(members) == len(value):
            for member in members:
                if not same(member.value, value[member.name]):
                    raise AssertionError(f"member {member.name!r} of {text!r}")
    else:
        for each in (parser, grower):
            try:
                each.close()
            except json.JSONDecodeError:
                pass
            else:
                raise AssertionError(f"close() accepted what json.loads refuses: {text!r}")

    updates = [u.ToolCallStart("c", "f"), *(u.ToolCallArgs("c", p) for p in pieces if p)]
    updates += [u.ToolCallEnd("c"), u.Finish(FinishReason.TOOL_CALLS)]
    results: list[Any] = []
    errors: list[Exception] = []
    reactivex.from_iterable(updates).pipe(ops.convert()).subscribe(results.append, errors.append)
    if errors:
        raise errors[0]
    calls = [c for r in results for c in r.contents if isinstance(c, ToolCallingContent)]
    if len(calls) != 1:
        raise AssertionError(f"expected one flushed call, got {calls!r}")
    if calls[0].error is None and not ok and text and not text.isspace():  # blank: {}
        raise AssertionError(f"invalid arguments flushed without an error: {text!r}")


def main() -> None:
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
