"""Reading Google-style docstrings: the summary and the parameter descriptions.

Tools take their description from the first paragraph of a function's
docstring and each parameter's description from its ``Args:`` section
(``Arguments:``, ``Parameters:``, ``Params:``, ``Keyword Args:``,
``Keyword Arguments:`` and ``Other Parameters:`` work too); attrs classes
used as argument types are read the same way. As in Sphinx's Napoleon,
only the section names it knows start a section, so a summary may end in
a colon.

Example:
    >>> parse_docstring('''Add two numbers.
    ...
    ...     Args:
    ...         a (int): The first.
    ...         b: The second,
    ...             continued.
    ...
    ...     Returns:
    ...         The sum.
    ...     ''')
    ('Add two numbers.', {'a': 'The first.', 'b': 'The second, continued.'})
    >>> parse_docstring('Search the web for:')
    ('Search the web for:', {})
"""

from __future__ import annotations

import inspect
import re

__all__ = ["parse_docstring"]

_ARGS_SECTIONS = frozenset(
    {
        "args",
        "arguments",
        "parameters",
        "params",
        "keyword args",
        "keyword arguments",
        "other parameters",
    }
)
_SECTIONS = _ARGS_SECTIONS | {  # the other sections Napoleon knows
    "attention",
    "attributes",
    "caution",
    "danger",
    "error",
    "example",
    "examples",
    "hint",
    "important",
    "methods",
    "note",
    "notes",
    "receive",
    "receives",
    "references",
    "return",
    "returns",
    "raise",
    "raises",
    "see also",
    "tip",
    "todo",
    "warn",
    "warning",
    "warnings",
    "warns",
    "yield",
    "yields",
}
_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_ARG_NAME = re.compile(r"^\*{0,2}(\w+)\s*")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph and the parameter descriptions of a Google docstring.

    Args:
        doc: The docstring, indented or not; ``None`` or empty for none.

    Returns:
        The first paragraph joined into one line (empty if there is none),
        and each documented parameter's description joined into one line.

    Example:
        >>> parse_docstring(None)
        ('', {})
        >>> parse_docstring('''Search.
        ...
        ...     Keyword Args:
        ...         opts (dict(str, int)): Options.
        ...     ''')
        ('Search.', {'opts': 'Options.'})
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    return _summary(lines), _arguments(lines)


def _section(line: str) -> str | None:
    """The (lower-case) name of the section ``line`` starts, or ``None``."""
    header = _HEADER.match(line)
    name = header.group(1).strip().lower() if header else None
    return name if name in _SECTIONS else None


def _summary(lines: list[str]) -> str:
    first: list[str] = []
    for line in lines:
        if not line.strip() or _section(line):
            break
        first.append(line.strip())
    return " ".join(first)


def _arguments(lines: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    in_args = False
    indent: int | None = None
    current: str | None = None
    for line in lines:
        section = _section(line)
        if section is not None:
            in_args, indent, current = section in _ARGS_SECTIONS, None, None
            continue
        if not in_args or not line.strip():
            continue
        if not line[0].isspace():
            in_args = False  # the section has ended
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        entry = _entry(line.strip()) if depth == indent else None
        if entry:
            current = entry[0]
            params[current] = entry[1]
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
    return params


def _entry(text: str) -> tuple[str, str] | None:
    """``name (type): description`` as ``(name, description)``; the type may nest parentheses."""
    name = _ARG_NAME.match(text)
    if name is None:
        return None
    rest = text[name.end() :]
    if rest.startswith("("):
        rest = rest[_type_length(rest) :].lstrip()
    if not rest.startswith(":"):
        return None
    return name.group(1), rest[1:].strip()


def _type_length(text: str) -> int:
    """The length of the parenthesised type ``text`` starts with; 0 if it never closes."""
    depth = 0
    for i, char in enumerate(text):
        depth += 1 if char == "(" else -1 if char == ")" else 0
        if depth == 0:
            return i + 1
    return 0
