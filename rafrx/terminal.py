"""Live rendering of a stream in a terminal, for the CLI.

:class:`TerminalRenderer` prints result chunks as they arrive, append-only:
text and reasoning stream in place, each tool call is a small card whose
arguments appear as they are parsed, with a progress line (updated in place,
at a bounded rate, the last update drawn once the interval is over) while a
long string argument streams; tool results,
approvals, errors and a usage line follow. With ``color=False`` it writes
plain text with no escape sequences and no carriage returns, fit for pipes
and logs.

Example:
    >>> import io
    >>> from rafrx.content import TextContent, ToolCallStartContent, ToolCallArgsParsedContent
    >>> from rafrx.response import AgentResponseResult
    >>> out = io.StringIO()
    >>> renderer = TerminalRenderer(out, color=False)
    >>> renderer.result(AgentResponseResult(contents=[TextContent("Checking.")]))
    >>> renderer.result(AgentResponseResult(contents=[
    ...     ToolCallStartContent("call_1", "get_weather"),
    ...     ToolCallArgsParsedContent("call_1", "city", "Paris")]))
    >>> print(out.getvalue())
    Checking.
    [tool] get_weather (call_1)
      city = "Paris"
    <BLANKLINE>
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any, Final, TextIO

import attrs

from rafrx import content as c
from rafrx import messages
from rafrx._fragments import join_surrogates
from rafrx._later import Later, call_later
from rafrx.errors import error_text
from rafrx.events import FinishEvent, ResponseStartedEvent, ToolApprovalRequestEvent
from rafrx.notebook._format import BIDI_CONTROLS, LONG_ARG_BYTES, human_size, one_line, usage_line
from rafrx.response import AgentResponse, AgentResponseResult, FinishReason, Usage

__all__ = ["TerminalRenderer", "supports_color"]

# Model-made names, ids and values are printed on one line (one_line), cut to: 100
# characters (its default) for a name, id or argument value, and to these for the rest.
_VALUE: Final = 300  # a tool's result or error, a link, why arguments are invalid
_ERROR: Final = 2000  # the error that ended a stream (a provider's message, may be long)


@attrs.frozen
class _Style:
    tool: str
    arg: str
    ok: str
    fail: str
    ask: str
    step: str
    reasoning: str


_PLAIN: Final = _Style("[tool]", "  ", "[ok]", "[failed]", "[approve?]", "--", "[thinking]")
_FANCY: Final = _Style("🔧", "  ", "✓", "✗", "?", "──", "💭")

_RESET, _DIM, _BOLD = "\x1b[0m", "\x1b[2m", "\x1b[1m"
_RED, _GREEN, _YELLOW, _CYAN = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[36m"
_CLEAR_LINE = "\r\x1b[K"
# Control characters other than tab and newline (C0, DEL, C1): from a stream, an escape
# sequence or a carriage return would drive the terminal (clear it, retitle it, hide text).
# And the bidi controls (marks, embeddings, overrides, isolates): they reorder what follows
# on a terminal that applies bidi, so "/tmp/\u202egnp.exe" would read as "/tmp/exe.png".
# And lone surrogates (a JSON "\ud83d" escape without its other half): no stream writes them.
_CONTROLS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI_CONTROLS}\ud800-\udfff]")


def inert(text: str) -> str:
    """``text`` with its control characters (but tab and newline), its bidi
    controls and its lone surrogates shown as U+FFFD.

    Example:
        >>> inert("ok\\x1b[2J\\rdone\\n") == "ok\\ufffd[2J\\ufffddone\\n"
        True
        >>> inert("/tmp/\\u202egnp.exe") == "/tmp/\\ufffdgnp.exe"
        True
    """
    return text if text.isprintable() else _CONTROLS.sub("\ufffd", text)


def supports_color(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that takes ANSI colours.

    ``NO_COLOR`` (any value) and ``TERM=dumb`` turn colours off.

    Example:
        >>> import io
        >>> supports_color(io.StringIO())
        False
    """
    if os.environ.get("NO_COLOR") is not None or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class TerminalRenderer:
    """Writes a stream of :class:`~rafrx.AgentResponseResult` chunks to a terminal.

    Args:
        stream: Where to write (``sys.stdout``).
        color: ANSI colours, Unicode card borders and in-place progress;
            ``None`` decides with :func:`supports_color`.
        interval: The shortest time between two in-place progress updates; an
            update that comes sooner is drawn when the interval is over (on the
            running event loop, else on a timer thread), unless something else
            was written since: a stream that pauses never leaves an old size shown.
    """

    def __init__(
        self, stream: TextIO, *, color: bool | None = None, interval: float = 0.05
    ) -> None:
        self.stream = stream
        self.color = supports_color(stream) if color is None else color
        self.style = _FANCY if self.color else _PLAIN
        self._interval = interval
        self._mode: str | None = None  # "text", "reasoning", "progress" or None (line start)
        self._names: dict[str, str] = {}
        self._progress: dict[tuple[str, str], int] = {}
        self._last_progress = 0.0
        self._unshown: tuple[str, int] | None = None  # the progress update not drawn yet
        self._redraw: Later | None = None
        # The stream may emit on a worker thread while the redraw timer fires on another.
        self._lock = threading.RLock()
        self._steps = 0
        self._step_usages: list[Usage] = []  # shown by each LLM call's finish line
        self._errors: list[str] = []  # ErrorContent, shown by error() or response()
        # A streamed text's last character, until the next delta says what it is: a high
        # surrogate (an emoji's first UTF-16 half) or a CR (of a CRLF line end?).
        self._held = ""

    # ------------------------------------------------------------ output helpers

    def _paint(self, text: str, *codes: str) -> str:
        text = inert(text)
        return f"{''.join(codes)}{text}{_RESET}" if self.color and codes else text

    def _line(self, text: str, *codes: str) -> None:
        self._break()
        self.stream.write(self._paint(text, *codes) + "\n")
        self.stream.flush()

    def _break(self) -> None:
        """End a streaming line (text, reasoning or an in-place progress line)."""
        self._cancel_redraw()
        if self._held:  # what would have made it whole never came
            self.stream.write(inert(self._held))
            self._held = ""
        if self._mode == "progress" and self.color:
            self.stream.write(_CLEAR_LINE)
        elif self._mode in ("text", "reasoning"):
            self.stream.write((_RESET if self.color else "") + "\n")
        self._mode = None

    def _stream_text(self, mode: str, text: str) -> None:
        if not text:  # (an empty reasoning delta carries data to send back: nothing to show)
            return
        if self._mode != mode:
            self._break()
            if mode == "reasoning":
                self.stream.write((_DIM if self.color else "") + self.style.reasoning + " ")
            self._mode = mode
        text, self._held = self._held + text, ""
        if text[-1] == "\r" or "\ud800" <= text[-1] <= "\udbff":  # a CRLF or an emoji cut
            text, self._held = text[:-1], text[-1]  # in two: wait for the rest
        if "\r\n" in text:  # a line end (a CR alone would drive the terminal: made inert)
            text = text.replace("\r\n", "\n")
        self.stream.write(inert(join_surrogates(text)))
        self.stream.flush()

    # ------------------------------------------------------------ public

    def result(self, result: AgentResponseResult) -> None:
        """Render one result chunk."""
        with self._lock:
            for event in result.events:
                self._event(event, result)
            for item in result.contents:
                self._content(item)

    def response(self, response: AgentResponse) -> None:
        """Finish with the turn's usage and finish reason (and any in-band error)."""
        with self._lock:
            self._footer(response)

    def _footer(self, response: AgentResponse) -> None:
        for message in self._errors:
            self._line(f"error: {one_line(message, _ERROR)}", _RED, _BOLD)
        if response.finish_reason is FinishReason.ERROR and not self._errors:
            self._line("error: the server ended the turn with an error", _RED, _BOLD)
        self._errors.clear()
        parts = [f"finish: {response.finish_reason}"]
        if response.usage is not None and self._step_usages != [response.usage]:
            parts.insert(0, usage_line(response.usage))  # else its one finish line showed them
        if response.model:
            parts.append(f"model: {one_line(response.model)}")
        self._line(" · ".join(parts), _DIM)

    def note(self, text: str, *, bold: bool = False) -> None:
        """Print a line of commentary (dim, or bold), ending any streaming line."""
        with self._lock:
            self._line(text, _BOLD if bold else _DIM)

    def error(self, error: BaseException) -> None:
        """Report the error that ended the stream (it replaces the stream's ``ErrorContent``)."""
        message = one_line(error_text(error), _ERROR)
        with self._lock:
            self._errors.clear()
            self._line(f"error: {type(error).__name__}: {message}", _RED, _BOLD)

    def close(self) -> None:
        """End the current line, if any."""
        with self._lock:
            self._break()
            self.stream.flush()

    # ------------------------------------------------------------ items

    def _event(self, event: Any, result: AgentResponseResult) -> None:
        if isinstance(event, ResponseStartedEvent):
            self._steps += 1
            if self._steps > 1:
                name = event.model or result.model
                model = f" ({one_line(name)})" if name else ""
                self._line(f"{self.style.step} step {self._steps}{model} {self.style.step}", _DIM)
        elif isinstance(event, ToolApprovalRequestEvent):
            self._names.setdefault(event.call_id, event.name)  # (a provider's tool: no start)
            args = one_line(event.arguments)
            name = one_line(event.name)
            self._line(f"{self.style.ask} approval asked: {name}({args})", _YELLOW)
        elif isinstance(event, FinishEvent) and event.usage is not None:
            self._step_usages.append(event.usage)
            self._line(f"{usage_line(event.usage)} · {event.finish_reason}", _DIM)

    def _content(self, item: c.Content) -> None:
        match item:
            case c.TextContent(text):
                self._stream_text("text", text)
            case c.ReasoningContent(
                provider_data={"type": messages.MCP_APPROVAL_RESPONSE} as answer
            ):
                asked = str(answer.get("approval_request_id"))
                name = one_line(self._names.get(asked, asked))
                if answer.get("approve") is True:  # (a provider's own tool: it runs it)
                    self._line(f"{self.style.ok} {name} approved", _GREEN)
                else:
                    why = one_line(answer.get("reason") or "", _VALUE)
                    self._line(f"{self.style.fail} {name} denied: {why}", _RED)
            case c.ReasoningContent(text):
                self._stream_text("reasoning", text)
            case c.UriContent(uri):
                self._line(f"link: {one_line(uri, _VALUE)}", _CYAN)
            case c.ToolCallStartContent(call_id, name):
                self._names[call_id] = name
                self._line(
                    f"{self.style.tool} {one_line(name)} ({one_line(call_id)})", _BOLD, _CYAN
                )
            case c.ToolCallArgsProgressContent(call_id, name, received):
                self._on_progress(call_id, name, received)
            case c.ToolCallArgsParsedContent(call_id, name, value):
                self._on_parsed(call_id, name, value)
            case c.ToolCallingContent(call_id, name, _args, raw, error) if error is not None:
                why = one_line(error, _VALUE)
                self._line(f"{self.style.arg}invalid arguments for {one_line(name)}: {why}", _RED)
                self._line(f"{self.style.arg}raw: {one_line(raw)}", _DIM)
            case c.ToolCallIncompleteContent(call_id, name, raw):
                why = one_line(item.error, _VALUE)
                self._line(f"{self.style.arg}{one_line(name)} never ran: {why}", _RED)
                self._line(f"{self.style.arg}raw: {one_line(raw)}", _DIM)
            case c.ToolCalledContent(call_id, result, error):
                name = one_line(self._names.get(call_id, call_id))
                if error is not None:
                    self._line(f"{self.style.fail} {name}: {one_line(error, _VALUE)}", _RED)
                else:
                    shown = one_line(result or "", _VALUE)
                    self._line(f"{self.style.ok} {name} → {shown}", _GREEN)
            case c.ErrorContent(message):
                self._errors.append(message)  # on_error follows: error() tells it
            case _:
                pass  # raw argument deltas, ends and usage show through the cards and footer

    def _on_progress(self, call_id: str, name: str, received: int) -> None:
        self._progress[(call_id, name)] = received
        if not self.color or received < LONG_ARG_BYTES:
            return  # plain output: the size is printed once the argument is complete
        wait = self._interval - (time.monotonic() - self._last_progress)
        if self._mode == "progress" and wait > 0:
            self._unshown = (name, received)
            self._redraw_soon(wait)
            return
        self._draw_progress(name, received)

    def _draw_progress(self, name: str, received: int) -> None:
        """Draw the in-place progress line of argument ``name``: ``received`` bytes so far."""
        if self._mode == "progress":
            self._cancel_redraw()  # (this draw shows what it would have)
            self.stream.write(_CLEAR_LINE)
        else:
            self._break()
        now = self._last_progress = time.monotonic()
        spinner = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"[int(now * 10) % 10]
        self.stream.write(
            self._paint(f"{self.style.arg}{one_line(name)} {spinner} {human_size(received)}", _DIM)
        )
        self.stream.flush()
        self._mode = "progress"

    def _redraw_soon(self, wait: float) -> None:
        """Draw the last progress update in ``wait`` seconds, unless a draw comes first."""
        if self._redraw is None:
            self._redraw = call_later(wait, self._on_redraw)

    def _on_redraw(self) -> None:
        with self._lock:
            self._redraw = None
            if self._mode == "progress" and self._unshown is not None:
                self._draw_progress(*self._unshown)

    def _cancel_redraw(self) -> None:
        self._unshown = None
        if self._redraw is not None:
            self._redraw.cancel()
            self._redraw = None

    def _on_parsed(self, call_id: str, name: str, value: Any) -> None:
        received = self._progress.pop((call_id, name), None)
        shown = one_line(name)
        if received is not None and received >= LONG_ARG_BYTES:
            first = value.splitlines()[0] if isinstance(value, str) and value else ""
            self._line(
                f"{self.style.arg}{shown}: {human_size(received)} received · {one_line(first, 60)}"
            )
        else:
            self._line(f"{self.style.arg}{shown} = {one_line(value, as_json=True)}")
