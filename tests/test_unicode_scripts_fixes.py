"""Regression tests of the bugs a "unicode across the stack" hunt found (the passing pins
are in ``test_unicode_scripts_hunt.py``).

Each failed on the commit before its fix, for the reason its docstring gives.
"""

from __future__ import annotations

import io
import json
from typing import Any

from reactivex import operators as rx

from rafrx import content, convert, from_sse
from rafrx.content import TextContent
from rafrx.notebook import LiveState, live_html, live_text
from rafrx.operators import aggregate
from rafrx.response import AgentResponseResult
from rafrx.terminal import TerminalRenderer


def _chat_call_body(pieces: list[str]) -> bytes:
    """An OpenAI chat SSE body streaming one call's arguments in ``pieces`` (each piece
    JSON-encoded at the event level, so a lone surrogate in a piece is a ``\\ud83d`` escape)."""
    out = b""
    for i, piece in enumerate(pieces):
        call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
        if i == 0:
            call.update(id="call_1", type="function")
            call["function"]["name"] = "echo"
        chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
        out += b"data: " + json.dumps(chunk).encode() + b"\n\n"
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    return out + b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n"


def test_an_emoji_split_between_two_argument_deltas_reaches_the_tool_whole() -> None:
    """What the user does: a model behind a server that slices strings by UTF-16 units
    (a JavaScript proxy, the same servers the text case was fixed for) streams a tool
    call's arguments ``{"s": "a😀b"}`` as two deltas, ``'{"s": "a\\ud83d'`` and
    ``'\\ude00b"}'`` (the halves escaped at the event level, as JSON.stringify writes them).

    What happens: the tool is called with ``{"s": "a\\ud83d\\ude00b"}``, two lone
    surrogates instead of the emoji (``s.encode()`` raises, a file write fails, and the
    call goes back to the provider as ``"a\\ufffd\\ufffdb"``: the character is lost).
    The progress contents carry ``"a\\ud83d"`` then ``"\\ude00b"`` (not whole code
    points) and count ``received`` = 8 bytes for a 6-byte value.

    What should happen: ``{"s": "a😀b"}``; progress fragments of whole code points adding
    up to 6 bytes.

    Evidence: DESIGN.md (parse_args_stream): "value = the newly decoded fragment, always
    whole code points" and "received = UTF-8 bytes of the decoded value so far". rafrx
    already joins the very same split in text and reasoning
    (``rafrx/_fragments.py: join_surrogates``, used by ``aggregate()`` and the terminal:
    "A server slicing text by UTF-16 units may send an emoji's two halves ... which
    print() and encode() refuse"); tests/test_unicode_hunt.py pins that for text.
    """
    body = _chat_call_body(['{"s": "a\ud83d', '\ude00b"}'])
    results = from_sse(body).pipe(convert(), rx.to_list()).run()
    items = [item for result in results for item in result.contents]
    calling = next(i for i in items if isinstance(i, content.ToolCallingContent))
    progress = [i for i in items if isinstance(i, content.ToolCallArgsProgressContent)]
    assert calling.arguments == {"s": "a😀b"}
    for p in progress:
        p.value.encode("utf-8")  # whole code points
    assert progress[-1].received == len("a😀b".encode())


def test_an_emoji_split_between_two_argument_deltas_is_whole_in_the_aggregated_message() -> None:
    """What the user does: as above, then reads the turn's assistant message (what the
    history saves and sends back next turn).

    What happens: its ``tool_calls[0].arguments`` hold two lone surrogates; sent to any
    provider they become U+FFFD U+FFFD (README: "a lone surrogate ... goes as U+FFFD").

    What should happen: the emoji, as ``aggregate()`` gives for the same split in text
    (``joined_text`` applies ``join_surrogates``; ``ordered_calls`` does not).
    """
    body = _chat_call_body(['{"s": "a\ud83d', '\ude00b"}'])
    response = from_sse(body).pipe(convert(), aggregate()).run()
    message = response.turn_transcript[-1]
    assert message.tool_calls is not None
    assert message.tool_calls[0].arguments == {"s": "a😀b"}


def test_the_notebook_live_view_shows_an_emoji_split_between_two_text_deltas() -> None:
    """What the user does: watches a reply stream in Jupyter (``rafrx.notebook.live``)
    from a server that sends an emoji's two UTF-16 halves in two text deltas.

    What happens: the live view (HTML and plain text) shows ``"a��b"``: each half is
    replaced by U+FFFD on its own (``showable``), although the two are adjacent in
    ``LiveState.text``.

    What should happen: ``"a😀b"``, as the terminal renderer shows it (it holds a high
    half for its other) and as ``aggregate()`` gives it (``response.text == "a😀b"``,
    pinned in tests/test_unicode_hunt.py). Same stream, same character, three views:
    only the notebook loses it.
    """
    state = LiveState()
    for piece in ("a\ud83d", "\ude00b"):
        state.add(AgentResponseResult(contents=[TextContent(piece)]))
    shown = live_text(state)
    page = live_html(state)
    assert "a😀b" in shown, shown
    assert "\ufffd" not in page


def test_the_terminal_shows_crlf_line_ends_as_line_ends_not_replacement_characters() -> None:
    """What the user does: ``rafrx chat`` / ``rafrx replay --plain``: the model writes a
    Windows-style file or a text with CRLF line ends (``"line1\\r\\nline2\\r\\n"``),
    perhaps with the CR ending one delta and the LF starting the next.

    What happens: every line of the reply ends with a visible U+FFFD: ``inert()``
    replaces the CR of each CRLF (``rafrx/terminal.py`` ``_CONTROLS``).

    What should happen: the CRLF is a line end and shows as one (``"line1\\nline2\\n"``):
    the CR is replaced because "a carriage return would drive the terminal (clear it,
    retitle it, hide text)" (terminal.py), and a CR right before an LF hides nothing.
    The SSE decoder itself (WHATWG) and Python's universal newlines read CRLF as one
    line end; the notebook view keeps the CR (``showable``), only the terminal mangles it.
    """
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    for piece in ("line1\r\n", "line2\r", "\nline3"):
        renderer.result(AgentResponseResult(contents=[TextContent(piece)]))
    renderer.close()
    assert out.getvalue() == "line1\nline2\nline3\n"


def test_parameter_descriptions_of_hindi_and_thai_parameter_names_are_kept() -> None:
    """What the user does: writes a tool in Hindi (or Thai, Tamil, Bengali...): Python
    takes ``नाम`` and ``ชื่อ`` as parameter names (``"नाम".isidentifier()`` is True), and
    the Google-style docstring describes them under ``Args:``.

    What happens: the schema sent to the model has no description for ``नाम`` nor for
    ``ชื่อ``, and worse, ``शहर``'s description becomes ``"शहर का नाम। ชื่อ: ชื่อของเมือง"``:
    the Thai parameter's line is glued to the Hindi one before it. ``_ARG_NAME`` in
    ``rafrx/_docstrings.py`` is ``\\w+``, and Python's ``\\w`` does not match the
    combining vowel signs (categories Mn/Mc: U+093E ``ा``, U+0E37 ``ื``, U+0E48 ``่``)
    that Python identifiers allow (PEP 3131: XID_Continue), so the line is read as a
    continuation of the previous description.

    What should happen: each parameter gets its own line's description, as ``città``
    and ``名前`` do (tests/test_unicode_scripts_hunt.py pins those).
    """
    from rafrx import tool

    @tool
    def khoj(नाम: str, शहर: str, ชื่อ: str) -> str:
        """खोज।

        Args:
            नाम: उपयोगकर्ता का नाम।
            शहर: शहर का नाम।
            ชื่อ: ชื่อของเมือง
        """
        return नाम + शहर + ชื่อ

    properties = khoj.to_openai()["function"]["parameters"]["properties"]
    assert {name: p.get("description") for name, p in properties.items()} == {
        "नाम": "उपयोगकर्ता का नाम।",
        "शहर": "शहर का नाम।",
        "ชื่อ": "ชื่อของเมือง",
    }
