"""Incremental, linear-time parsing of streamed tool-call arguments.

An LLM streams a tool call's JSON arguments as many small string fragments
that split the text anywhere: inside a key, an escape, a number or a surrogate
pair. :class:`StreamingArgsParser` consumes them one :meth:`~StreamingArgsParser.feed`
at a time and, when the arguments are a JSON object, reports

* :class:`ArgProgress` after each fragment that decoded more characters of a
  top-level string value (``content`` growing, as decoded text), and
* :class:`ArgMember` the moment a top-level member's value is complete.

Total work is linear in the size of the arguments however finely they are
split: the scanner examines each character once (plus at most a few held-back
characters of an escape split across fragments), string runs are matched with
compiled regular expressions and decoded with the C ``scanstring`` of the
:mod:`json` module, and a nested member value is validated as it streams and
decoded with one :func:`json.loads` of its slice when it closes. Only the
unconsumed tail of an escape is carried between feeds.

It accepts exactly the texts :func:`json.loads` (strict) accepts, which settles
the implementation-defined cases of JSONTestSuite: ``NaN``, ``Infinity`` and
``-Infinity`` are accepted; huge numbers become ``float('inf')`` / ``0.0`` or
an ``int`` (one longer than ``sys.get_int_max_str_digits()`` is invalid);
lone surrogate escapes are kept as lone surrogates; a leading BOM is
rejected. The scanner keeps an explicit stack (no recursion, no depth limit of
its own); a value nested deeper than :func:`json.loads` can build
(``RecursionError``) is reported invalid, as ``json.loads`` fails on it too.
The parser calls :func:`json.loads` a few frames below its caller, so right
at the interpreter's recursion limit it gives up a few levels of nesting
before a direct :func:`json.loads` would (about 990 with the default limit
of 1000).

Example:
    >>> parser = StreamingArgsParser()
    >>> for event in parser.feed('{"path": "a.py", "content": "print(1'):
    ...     print(event)
    ArgProgress(name='path', received=4, fragment='a.py')
    ArgMember(name='path', value='a.py')
    ArgProgress(name='content', received=7, fragment='print(1')
    >>> for event in parser.feed(')\\\\n"}'):
    ...     print(event)
    ArgProgress(name='content', received=9, fragment=')\\n')
    ArgMember(name='content', value='print(1)\\n')
    >>> parser.close()
    {'path': 'a.py', 'content': 'print(1)\\n'}
    >>> bad = StreamingArgsParser()
    >>> bad.feed('{"a": tru!'), bad.error
    ([], 'Expecting value at offset 6')
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final, Generic, TypeAlias, TypeVar, cast, final, overload

import attrs

from rafrx._fragments import COMPACT_AT, compact, joined
from rafrx._partial_json import partial_json
from rafrx._slot_init import slot_init

__all__ = ["ArgEvent", "ArgMember", "ArgProgress", "StreamingArgsParser", "partial_json"]


@final
@slot_init
@attrs.frozen
class ArgMember:
    """A top-level member of the arguments object is complete."""

    name: str
    """The member's key (decoded)."""
    value: Any
    """The member's value: equals ``json.loads(full)[name]`` when keys are unique."""


@final
@slot_init
@attrs.frozen
class ArgProgress:
    """A top-level string value grew."""

    name: str
    """The member's key (decoded)."""
    received: int
    """UTF-8 byte length of the decoded value so far (lone surrogates count 3)."""
    fragment: str
    """The text decoded by this feed, always whole code points."""


ArgEvent: TypeAlias = ArgMember | ArgProgress
"""What :meth:`StreamingArgsParser.feed` reports by default."""

E = TypeVar("E")


def _matcher(pattern: str) -> Callable[[str, int], re.Match[str]]:
    # ``pattern`` matches the empty string (or is tried only where it matches,
    # as _KEY_HEAD at a quote), so its ``match`` never returns None.
    return cast("Callable[[str, int], re.Match[str]]", re.compile(pattern).match)


_WS: Final = _matcher(r"[ \t\n\r]*")
# Complete, valid string content; a high surrogate escape only when what follows
# shows whether it is paired (else it waits, so a pair is never split).
_CONTENT: Final = _matcher(
    r'(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u(?![dD][89abAB])[0-9a-fA-F]{4}'
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}(?=[^\\]|\\[^u]|\\u[0-9a-fA-F]{4}))*+"
)
_scanstring: Final[Callable[[str, int], tuple[str, int]]] = json.decoder.scanstring  # type: ignore[attr-defined]
# What may follow unfinished string content at the end of a fragment: an
# incomplete escape, or a high surrogate escape whose follower is not known yet.
_PENDING: Final = re.compile(
    r"\\(?:u[0-9a-fA-F]{0,3})?|\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\(?:u[0-9a-fA-F]{0,3})?)?"
)
# A key's plain run from its opening quote, then its closing quote and colon if they
# follow; _NEXT_KEY: the same after the comma that ends an object's member.
_KEY_REST = r'"([^"\\\x00-\x1f]*+)(?:(")[ \t\n\r]*+(?:(:)[ \t\n\r]*+)?)?'
_KEY_HEAD: Final = _matcher(_KEY_REST)
_NEXT_KEY: Final = re.compile(r",[ \t\n\r]*+" + _KEY_REST).match
_DIGITS: Final = _matcher(r"[0-9]*")
_LITERALS: Final = {"t": "true", "f": "false", "n": "null", "N": "NaN", "I": "Infinity"}
_CONSTANTS: Final[dict[str, Any]] = {
    word: json.loads(word) for word in (*_LITERALS.values(), "-Infinity")
}
_WHITESPACE: Final = frozenset(" \t\n\r")

# Scanner modes.
_VALUE, _KEY, _COLON, _AFTER, _STRING, _NUMBER, _LITERAL = range(7)
# Number states (ZERO, INT, FRAC and EXP accept).
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_SIGN, _N_EXP = range(8)
_N_ACCEPT: Final = frozenset({_N_ZERO, _N_INT, _N_FRAC, _N_EXP})
_N_INTEGER: Final = frozenset({_N_ZERO, _N_INT})
# How the value of a tracked (member or whole-document) value is obtained.
_K_STRING, _K_CAPTURE, _K_LITERAL, _K_NUMBER = range(4)


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class StreamingArgsParser(Generic[E]):
    """Incremental JSON parser for streamed tool-call arguments.

    Feed fragments with :meth:`feed`, which returns the events they completed
    and never raises on bad JSON: invalid input sets :attr:`error` as soon as
    no continuation could make it valid, and later feeds do nothing.
    :meth:`close` marks the end of input and returns the complete value.

    Args:
        max_bytes: Reject the arguments (set :attr:`error`) once the UTF-8
            size of everything fed exceeds this; the offending fragment and
            later ones are not kept.
        progress: Builds the event for a grown string value from ``(name,
            received, fragment)``; :class:`ArgProgress` by default.
        member: Builds the event for a complete member from ``(name,
            value)``; :class:`ArgMember` by default. With both, :meth:`feed`
            returns your own objects, built once, with no intermediate event.

    Example:
        >>> parser = StreamingArgsParser(
        ...     progress=lambda name, received, fragment: ("grew", name, fragment),
        ...     member=lambda name, value: ("done", name, value),
        ... )
        >>> parser.feed('{"n": 1, "s": "ab"}')
        [('done', 'n', 1), ('grew', 's', 'ab'), ('done', 's', 'ab')]
    """

    # The scanner reads and writes these attributes a few times per token: slot
    # access is measurably faster than an instance dict of this size.
    __slots__ = (
        "_bytes",
        "_cap",
        "_cap_blocks",
        "_cap_from",
        "_cap_start",
        "_closed",
        "_done",
        "_error",
        "_error_pos",
        "_events",
        "_fed",
        "_first",
        "_growing",
        "_is_key",
        "_key_parts",
        "_kind",
        "_lit",
        "_lit_pos",
        "_max_bytes",
        "_member",
        "_members",
        "_mode",
        "_name",
        "_num",
        "_out",
        "_pending",
        "_pieces",
        "_progress",
        "_progress_from",
        "_raw_blocks",
        "_received",
        "_result",
        "_scanned",
        "_stack",
        "_top_object",
        "_val_blocks",
        "_val_parts",
    )

    @overload
    def __init__(self: StreamingArgsParser[ArgEvent], *, max_bytes: int | None = None) -> None: ...

    @overload
    def __init__(
        self,
        *,
        max_bytes: int | None = None,
        progress: Callable[[str, int, str], E],
        member: Callable[[str, Any], E],
    ) -> None: ...

    def __init__(
        self,
        *,
        max_bytes: int | None = None,
        progress: Callable[[str, int, str], Any] = ArgProgress,
        member: Callable[[str, Any], Any] = ArgMember,
    ) -> None:
        self._progress = progress
        self._member = member
        self._max_bytes = max_bytes
        # What is kept goes into blocks every COMPACT_AT fragments (rafrx._fragments).
        self._pieces: list[str] = []  # fed, since the last block of _raw_blocks
        self._raw_blocks: list[str] = []
        self._fed = 0  # characters fed so far
        self._bytes = 0
        self._error: str | None = None
        self._error_pos = 0
        self._closed = False
        self._scanned = 0  # characters examined, including json.loads of slices
        self._events: list[E] = []
        # Structure.
        self._mode = _VALUE
        self._stack: list[str] = []  # expected closers, "}" or "]"
        self._first = False  # a container just opened: its closer may follow
        self._top_object = False
        self._done = False
        self._result: Any = None
        # Strings.
        self._is_key = False
        self._out: list[str] | None = None  # decoded text goes here, if tracked
        self._pending = ""  # unfinished string content carried to the next feed
        self._growing = False  # in a top-level string value (and no error)
        # Numbers and literals.
        self._num = _N_MINUS
        self._lit = ""
        self._lit_pos = 0
        # Capture of a tracked value's text, as pieces.
        self._cap: list[str] | None = None
        self._cap_blocks: list[str] = []
        self._cap_from = 0  # index in the current fragment
        self._cap_start = 0  # absolute offset
        # Top-level object members.
        self._members: dict[str, Any] = {}
        self._kind = _K_CAPTURE
        self._name = ""
        self._key_parts: list[str] = []
        self._val_parts: list[str] = []  # decoded, since the last block of _val_blocks
        self._val_blocks: list[str] = []
        self._progress_from = 0  # _val_parts[:_progress_from] were reported
        self._received = 0

    @property
    def error(self) -> str | None:
        """Why the input is invalid (with the offset), or None while it may be valid."""
        if self._error is None:
            return None
        return f"{self._error} at offset {self._error_pos}"

    @property
    def text(self) -> str:
        """Everything fed so far, joined once per call after new fragments."""
        if self._raw_blocks or len(self._pieces) != 1:
            self._pieces = [joined(self._raw_blocks, self._pieces)]
            self._raw_blocks = []
        return self._pieces[0]

    def feed(self, fragment: str) -> list[E]:
        """Consume the next fragment of the arguments.

        Args:
            fragment: Any piece of the JSON text, split anywhere.

        Returns:
            The events this fragment completed, in order; ``[]`` once
            :attr:`error` is set.

        Raises:
            RuntimeError: If called after :meth:`close`.
        """
        if self._growing:
            grown = self.grow(fragment)
            if grown is not None:
                name, received, text = grown
                return [self._progress(name, received, text)]
        if self._closed:
            raise RuntimeError("feed() after close()")
        if self._max_bytes is not None:
            self._bytes += _utf8_len(fragment)
            if self._bytes > self._max_bytes:
                if self._error is None:
                    self._fail(f"arguments exceed {self._max_bytes} bytes", self._fed)
                return []
        pieces = self._pieces
        pieces.append(fragment)
        if len(pieces) >= COMPACT_AT:
            self._compact()
        base = self._fed
        self._fed += len(fragment)
        if self._error is not None or not fragment:
            return []
        if self._pending:
            base -= len(self._pending)
            fragment = self._pending + fragment
            self._pending = ""
        events: list[E] = []
        self._events = events
        self._run(fragment, base)
        if self._error is None:
            if self._cap is not None:
                self._cap.append(fragment[self._cap_from : len(fragment) - len(self._pending)])
                self._cap_from = 0
            if self._mode == _STRING and self._out is self._val_parts:
                self._flush_progress()
        return events

    def grow(self, fragment: str) -> tuple[str, int, str] | None:
        """:meth:`feed`'s fast path alone: more of a top-level string value, or nothing.

        When the parser is inside a top-level string value and ``fragment``
        continues it (decoding at least one character) without ending it,
        this consumes ``fragment`` exactly as :meth:`feed` would and returns
        the ``(name, received, fragment)`` that :meth:`feed` would pass to
        ``progress``, without building the event. Otherwise it consumes
        nothing and returns ``None``: pass the fragment to :meth:`feed`.
        Most fragments of a large argument (a file's content) take this path,
        so a caller building its own event per fragment saves a callback and
        a list each time.

        Example:
            >>> parser = StreamingArgsParser()
            >>> parser.grow('{"content": "'), parser.feed('{"content": "')
            (None, [])
            >>> parser.grow("print(1)"), parser.grow('")'), parser.feed('"}')
            (('content', 8, 'print(1)'), None, [ArgMember(name='content', value='print(1)')])
        """
        if not self._growing or self._max_bytes is not None:
            return None
        s = fragment
        n = len(s)
        if self._pending or "\\" in s or not s.isprintable():
            # An escape or a control character: the regular expression decides.
            s = self._pending + s
            n = len(s)
            j = _CONTENT(s, 0).end()
            if j == n:
                self._pending = ""
            elif j and s[j] == "\\" and _PENDING.fullmatch(s, j) is not None:
                self._pending = s[j:]
                s = s[:j]
            else:
                return None
            if "\\" in s:
                s = _scanstring(s + '"', 0)[0]
        elif not n or '"' in s:
            return None  # a quote with no escape before it ends the value: feed() parses on
        pieces = self._pieces
        pieces.append(fragment)
        if len(pieces) >= COMPACT_AT:
            self._compact()
        self._fed += len(fragment)
        self._scanned += n
        self._val_parts.append(s)
        self._progress_from += 1
        self._received += len(s) if s.isascii() else _utf8_len(s)
        return self._name, self._received, s

    def close(self) -> Any:
        """Mark the end of input.

        Returns:
            The complete value, equal to ``json.loads`` of everything fed.

        Raises:
            json.JSONDecodeError: If the input is invalid or incomplete (the
                message and position are those of :attr:`error`).
        """
        if not self._closed:
            self._closed = True
            self._growing = False
            if self._error is None:
                if self._mode == _NUMBER and not self._stack and self._num in _N_ACCEPT:
                    self._value_done("", 0)
                if self._error is None and not self._done:
                    started = self._mode != _VALUE or self._stack
                    msg = "Unexpected end of input" if started else "Expecting value"
                    self._fail(msg, self._fed)
        if self._error is not None:
            raise json.JSONDecodeError(self._error, self.text, self._error_pos)
        return self._result

    # -- scanner -------------------------------------------------------------

    def _fail(self, message: str, pos: int) -> None:
        self._growing = False
        self._error = message
        self._error_pos = pos

    def _run(self, s: str, base: int) -> None:
        n = len(s)
        i = 0
        while i < n:
            mode = self._mode
            if mode == _STRING:
                i = self._string(s, i, n, base)
            elif mode == _NUMBER:
                i = self._number(s, i, n, base)
            elif mode == _LITERAL:
                i = self._literal(s, i, n, base)
            else:  # between tokens
                c = s[i]
                if c in _WHITESPACE:
                    j = i + 1  # usually one space: no regex call for it
                    if j < n and s[j] in _WHITESPACE:
                        j = _WS(s, j).end()
                    self._scanned += j - i
                    if j == n:
                        return
                    i = j
                    c = s[i]
                self._scanned += 1
                if mode == _VALUE:
                    i = self._start_value(c, s, i, base)
                elif mode == _KEY:
                    i = self._start_key(c, s, i, base)
                elif mode == _COLON and c == ":":
                    self._mode = _VALUE
                    i += 1
                elif mode == _AFTER and self._stack:
                    stack = self._stack
                    if c == ",":
                        if stack[-1] == "]":
                            self._mode = _VALUE
                        else:
                            key = _NEXT_KEY(s, i)
                            if key is not None:  # one match for the comma, key and colon
                                i = self._key(key, i)
                                continue
                            self._mode = _KEY
                    elif c == stack[-1]:
                        stack.pop()
                        self._value_done(s, i + 1)
                    else:
                        self._fail("Expecting ',' delimiter", base + i)
                    i += 1
                else:
                    msg = "Expecting ':' delimiter" if mode == _COLON else "Extra data"
                    self._fail(msg, base + i)
            if self._error is not None:
                return

    def _start_value(self, c: str, s: str, i: int, base: int) -> int:
        stack = self._stack
        depth = len(stack)
        tracked = depth == 0 or (depth == 1 and self._top_object)
        first = self._first
        self._first = False
        if c == '"':
            self._mode = _STRING
            self._is_key = False
            self._out = None
            if depth == 0:
                self._begin_capture(i, base)
            elif tracked:
                self._kind = _K_STRING
                self._val_parts = []
                self._val_blocks = []
                self._out = self._val_parts
                self._growing = True
                self._progress_from = 0
                self._received = 0
        elif c == "{" or c == "[":
            if depth == 0 and c == "{":
                self._top_object = True
            elif tracked:
                self._begin_capture(i, base)
            stack.append("}" if c == "{" else "]")
            self._mode = _KEY if c == "{" else _VALUE
            self._first = True
        elif c == "]" and first:
            stack.pop()
            self._value_done(s, i + 1)
        elif c == "-" or "0" <= c <= "9":
            if tracked:
                self._begin_capture(i, base)
                self._kind = _K_NUMBER
            self._mode = _NUMBER
            self._num = _N_MINUS if c == "-" else _N_ZERO if c == "0" else _N_INT
        elif c in _LITERALS:
            if tracked:
                self._kind = _K_LITERAL
            self._mode = _LITERAL
            self._lit = _LITERALS[c]
            self._lit_pos = 1
        else:
            self._fail("Expecting value", base + i)
        return i + 1

    def _start_key(self, c: str, s: str, i: int, base: int) -> int:
        first = self._first
        self._first = False
        if c == '"':
            return self._key(_KEY_HEAD(s, i), i)
        if c == "}" and first:
            self._stack.pop()
            self._value_done(s, i + 1)
        else:
            self._fail("Expecting property name enclosed in double quotes", base + i)
        return i + 1

    def _key(self, m: re.Match[str], i: int) -> int:
        """A key matched from ``i`` (its quote, or the comma before it, was counted):
        its plain run, closing quote and colon."""
        j = m.end()
        self._scanned += j - i - 1
        key = m[1]
        tracked = len(self._stack) == 1 and self._top_object
        if m[2] is None:  # the key goes on (an escape, the fragment's end) or is invalid
            self._mode = _STRING
            self._is_key = True
            self._out = None
            if tracked:
                self._key_parts = [key] if key else []
                self._out = self._key_parts
        else:
            if tracked:
                self._name = key
            self._mode = _COLON if m[3] is None else _VALUE
        return j

    def _string(self, s: str, i: int, n: int, base: int) -> int:
        j = _CONTENT(s, i).end()
        self._scanned += j - i
        out = self._out
        if j < n and s[j] == '"':
            self._growing = False
            if out is not None and j > i:
                out.append(s[i:j] if s.find("\\", i, j) < 0 else _scanstring(s, i)[0])
            if self._is_key:
                self._mode = _COLON
                if out is not None:
                    self._name = "".join(out)
            else:
                self._value_done(s, j + 1)
            return j + 1
        if j < n:
            if s[j] != "\\":
                self._fail("Invalid control character", base + j)
                return n
            if _PENDING.fullmatch(s, j) is None:
                bad_u = j + 1 < n and s[j + 1] == "u"
                self._fail("Invalid \\uXXXX escape" if bad_u else "Invalid \\escape", base + j)
                return n
            self._pending = s[j:]
        if out is not None and j > i:
            out.append(s[i:j] if s.find("\\", i, j) < 0 else _scanstring(s[i:j] + '"', 0)[0])
        return n

    def _number(self, s: str, i: int, n: int, base: int) -> int:
        st = self._num
        digits = _DIGITS
        while i < n:
            if st in (_N_INT, _N_FRAC, _N_EXP):
                j = digits(s, i).end()
                self._scanned += j - i
                i = j
                if i == n:
                    break
            c = s[i]
            self._scanned += 1
            if st == _N_MINUS:
                if c == "0":
                    st = _N_ZERO
                elif "1" <= c <= "9":
                    st = _N_INT
                elif c == "I":
                    self._mode = _LITERAL
                    self._lit = "-Infinity"
                    self._lit_pos = 2
                    return i + 1
                else:
                    self._fail("Expecting value", base + i - 1)
                    return n
            elif st == _N_DOT:
                if not "0" <= c <= "9":
                    self._fail("Expecting digit after '.'", base + i)
                    return n
                st = _N_FRAC
            elif st in (_N_E, _N_SIGN):
                if "0" <= c <= "9":
                    st = _N_EXP
                elif st == _N_E and (c == "+" or c == "-"):
                    st = _N_SIGN
                else:
                    self._fail("Expecting exponent digit", base + i)
                    return n
            elif c == "." and st in (_N_ZERO, _N_INT):
                st = _N_DOT
            elif (c == "e" or c == "E") and st != _N_EXP:
                st = _N_E
            else:  # the number ended at c: complete only if c may follow a value
                stack = self._stack
                if c in _WHITESPACE or (stack and (c == "," or c == stack[-1])):
                    self._num = st
                    self._value_done(s, i)
                    return i
                self._fail("Expecting ',' delimiter" if stack else "Extra data", base + i)
                return n
            i += 1
        self._num = st
        return i

    def _literal(self, s: str, i: int, n: int, base: int) -> int:
        lit = self._lit
        pos = self._lit_pos
        k = min(len(lit) - pos, n - i)
        self._scanned += k
        if s[i : i + k] != lit[pos : pos + k]:
            self._fail("Expecting value", base + i - pos)
            return n
        pos += k
        i += k
        self._lit_pos = pos
        if pos == len(lit):
            self._value_done(s, i)
        return i

    # -- values --------------------------------------------------------------

    def _begin_capture(self, i: int, base: int) -> None:
        self._kind = _K_CAPTURE
        self._cap = []
        self._cap_blocks = []
        self._cap_from = i
        self._cap_start = base + i

    def _compact(self) -> None:
        """Join the fragments kept so far into one block each for the raw text,
        the string value being reported and the value being captured."""
        compact(self._pieces, self._raw_blocks)
        parts, reported = self._val_parts, self._progress_from
        if reported > 1:
            self._val_blocks.append("".join(parts[:reported]))
            del parts[:reported]
            self._progress_from = 0
        cap = self._cap
        if cap is not None and len(cap) > 1:
            compact(cap, self._cap_blocks)

    def _load_capture(self, s: str, end: int) -> Any:
        cap = self._cap
        assert cap is not None
        self._cap = None
        cap.append(s[self._cap_from : end])
        text = joined(self._cap_blocks, cap)
        self._cap_blocks = []
        self._scanned += len(text)
        try:
            if self._kind == _K_NUMBER:  # the scanner checked the grammar; decode as json does
                return int(text) if self._num in _N_INTEGER else float(text)
            return json.loads(text)
        except RecursionError:
            self._fail("Value nested too deeply", self._cap_start)
        except ValueError as exc:  # e.g. an int longer than sys.get_int_max_str_digits()
            self._fail(f"Invalid value ({exc})", self._cap_start)
        return None

    def _value_done(self, s: str, end: int) -> None:
        """A value ended just before ``s[end]``; record or report it if it is tracked."""
        self._mode = _AFTER
        depth = len(self._stack)
        if depth == 0:
            self._done = True
            if self._top_object:
                self._result = self._members
            elif self._kind == _K_LITERAL:
                self._result = _CONSTANTS[self._lit]
            else:
                self._result = self._load_capture(s, end)
        elif depth == 1 and self._top_object:
            kind = self._kind
            if kind == _K_STRING:
                self._flush_progress()
                value = joined(self._val_blocks, self._val_parts)
            elif kind == _K_LITERAL:
                value = _CONSTANTS[self._lit]
            else:
                value = self._load_capture(s, end)
                if self._error is not None:
                    return
            self._members[self._name] = value
            self._events.append(self._member(self._name, value))

    def _flush_progress(self) -> None:
        parts = self._val_parts
        start = self._progress_from
        if len(parts) > start:
            if len(parts) > start + 1:
                new = "".join(parts[start:])
                del parts[start:]
                parts.append(new)
            else:
                new = parts[start]
            self._progress_from = start + 1
            self._received += len(new) if new.isascii() else _utf8_len(new)
            self._events.append(self._progress(self._name, self._received, new))
