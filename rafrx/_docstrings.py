"""Reading Google-style docstrings: the summary and the ``Args:`` descriptions.

Tools take their description from the first paragraph of a function's
docstring and each parameter's description from its ``Args:`` section
(``Arguments:``, ``Parameters:`` and ``Params:`` work too); attrs classes
used as argument types are read the same way.

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
"""

from __future__ import annotations

import inspect
import re

__all__ = ["parse_docstring"]

_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_ARGS_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_ARG_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph and the ``Args:`` descriptions of a Google docstring.

    Args:
        doc: The docstring, indented or not; ``None`` or empty for none.

    Returns:
        The first paragraph joined into one line (empty if there is none),
        and each documented parameter's description joined into one line.

    Example:
        >>> parse_docstring(None)
        ('', {})
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    return _summary(lines), _arguments(lines)


def _summary(lines: list[str]) -> str:
    first: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        first.append(line.strip())
    return " ".join(first)


def _arguments(lines: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    in_args = False
    indent: int | None = None
    current: str | None = None
    for line in lines:
        if _ARGS_SECTION.match(line):
            in_args, indent, current = True, None, None
            continue
        if not in_args:
            continue
        if line.strip() and not line[0].isspace():
            break  # the next section
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        entry = _ARG_ENTRY.match(line.strip())
        if depth == indent and entry:
            current = entry.group(1)
            params[current] = entry.group(2).strip()
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
    return params
