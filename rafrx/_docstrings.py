"""Reading docstrings: the description and the parameter descriptions.

Tools take their description from a function's docstring, all of the text
before its first section, and each parameter's description from any of the
three common styles:

* Google: an ``Args:`` section (``Arguments:``, ``Parameters:``, ``Params:``,
  ``Keyword Args:``, ``Keyword Arguments:`` and ``Other Parameters:`` work
  too, and ``Attributes:`` for a class's fields). As in Sphinx's Napoleon, only the section names it knows start a
  section, so a description may end in a colon.
* Sphinx (reST): ``:param city: The city.`` or ``:param str city: ...``.
* NumPy: a ``Parameters`` section underlined with dashes, ``city : str``
  over its indented description.

attrs, dataclass and pydantic classes used as argument types are read the same way.

Example:
    >>> parse_docstring('''Add two numbers.
    ...
    ...     Both may be negative.
    ...
    ...     Args:
    ...         a (int): The first.
    ...         b: The second,
    ...             continued.
    ...
    ...     Returns:
    ...         The sum.
    ...     ''')
    ('Add two numbers.\\n\\nBoth may be negative.', {'a': 'The first.', 'b': 'The second, continued.'})
    >>> parse_docstring('''Search.
    ...
    ...     :param str query: What to look for,
    ...         in words.
    ...     :returns: The hits.
    ...     ''')
    ('Search.', {'query': 'What to look for, in words.'})
    >>> parse_docstring('''Search.
    ...
    ...     Parameters
    ...     ----------
    ...     query : str
    ...         What to look for.
    ...     ''')
    ('Search.', {'query': 'What to look for.'})
"""  # noqa: E501

from __future__ import annotations

import inspect
import re
import unicodedata

__all__ = ["parse_docstring"]

_ARGS_SECTIONS = frozenset(
    {
        "args",
        "arguments",
        "attributes",  # a class's fields
        "parameters",
        "params",
        "keyword args",
        "keyword arguments",
        "other parameters",
    }
)
_SECTIONS = _ARGS_SECTIONS | {  # the other sections Napoleon knows
    "attention",
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
_NUMPY_SECTIONS = frozenset({"parameters", "other parameters", "keyword arguments", "attributes"})
_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
# What ends a description: a Sphinx field (``:param x:``, not the role ``:func:`f```),
# a doctest or a reST directive.
_FIELD = re.compile(r"^(?::[^:`\s][^:`]*:(?!`)|>>>|\.\. )")
_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
# ``:param name: text`` and ``:param type name: text`` (``arg``, ``key`` … too)
# A parameter's name: any identifier, combining marks too (Python takes नाम and ชื่อ,
# where ``\w`` stops at their vowel signs); the caller checks it is one.
_NAME = r"([^\W\d][^\s:(),*]*)"
_SPHINX_PARAM = re.compile(
    r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?\*{0,2}" + _NAME + r"\s*:(.*)$"
)
_ARG_NAME = re.compile(r"^\*{0,2}" + _NAME + r"\s*")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description and the parameter descriptions of a docstring.

    Args:
        doc: The docstring, indented or not; ``None`` or empty for none.

    Returns:
        The text before the first section, field list or doctest, its
        paragraphs separated by a blank line and each paragraph's lines
        joined into one (empty if there is none); and each documented
        parameter's description joined into one line.

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
    # (Windows line ends first: Python 3.13's cleandoc keeps the indent of "\r"-ended lines)
    lines = inspect.cleandoc(doc.replace("\r\n", "\n").replace("\r", "\n")).splitlines()
    params = {**_numpy(lines), **_sphinx(lines), **_google(lines)}
    # (as Python reads the function's own names: NFKC, so a docstring in NFD matches)
    return _description(lines), {
        unicodedata.normalize("NFKC", name): text
        for name, text in params.items()
        if name.isidentifier()
    }


def _section(line: str) -> str | None:
    """The (lower-case) name of the Google section ``line`` starts, or ``None``."""
    header = _HEADER.match(line)
    name = header.group(1).strip().lower() if header else None
    return name if name in _SECTIONS else None


def _numpy_section(lines: list[str], i: int) -> str | None:
    """The (lower-case) name of the NumPy section at ``lines[i]`` (over dashes), or ``None``."""
    if i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1]) and lines[i].strip():
        return lines[i].strip().lower()
    return None


def _description(lines: list[str]) -> str:
    paragraphs: list[list[str]] = [[]]
    for i, line in enumerate(lines):
        text = line.strip()
        if _section(line) or _numpy_section(lines, i) or _FIELD.match(text):
            break
        if text:
            paragraphs[-1].append(text)
        elif paragraphs[-1]:
            paragraphs.append([])
    return "\n\n".join(" ".join(p) for p in paragraphs if p)


def _google(lines: list[str]) -> dict[str, str]:
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
        depth = _depth(line)
        if indent is None:
            indent = depth
        entry = _entry(line.strip()) if depth == indent else None
        if entry:
            current = entry[0]
            params[current] = entry[1]
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
    return params


def _sphinx(lines: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    current: str | None = None
    for line in lines:
        field = _SPHINX_PARAM.match(line.strip())
        if field:
            current = field.group(1)
            params[current] = field.group(2).strip()
        elif current is not None and line[:1].isspace() and line.strip():
            params[current] = (params[current] + " " + line.strip()).strip()
        else:
            current = None  # another field, a blank line or text: the description has ended
    return params


def _numpy(lines: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    names: list[str] = []
    in_params = False
    for i, line in enumerate(lines):
        section = _numpy_section(lines, i)
        if section is not None:
            in_params, names = section in _NUMPY_SECTIONS, []
            continue
        if not in_params or _UNDERLINE.match(line) or not line.strip():
            continue
        if not line[0].isspace():  # ``a, b : int``: the names, then their type
            listed = line.partition(" : ")[0] if " : " in line else line.rstrip(" :")
            names = [n.strip().lstrip("*") for n in listed.split(",")]
            names = [n for n in names if n.isidentifier()]
            params.update(dict.fromkeys(names, ""))
        else:
            for name in names:
                params[name] = (params[name] + " " + line.strip()).strip()
    return {name: text for name, text in params.items() if text}


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip())


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
