"""The ``rafrx`` command line: ``demo``, ``replay``, ``chat`` and ``serve``.

* ``rafrx demo`` starts the embedded scripted LLM server in-process and runs
  an agent turn with tools against it, rendered live in the terminal: no
  network, no API key.
* ``rafrx replay FILE`` runs a recorded ``.sse`` (or a ``.jsonl`` recording)
  through the pipeline and shows it, or prints JSON lines with ``--json``.
* ``rafrx chat --base-url URL --model M`` chats with any OpenAI-compatible,
  Anthropic or Responses endpoint, reading lines from stdin.
* ``rafrx serve`` runs the scripted server until Ctrl-C, for other programs.

Bad arguments, missing files and unreachable endpoints give a one-line
message and exit status 2; a stream that fails gives status 1.

Example:
    >>> main(["replay", "no/such/file.sse"])
    2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from rafrx.agent import Agent
    from rafrx.events import ToolApprovalRequestEvent
    from rafrx.response import AgentResponse, AgentResponseResult
    from rafrx.sources.clients import LLMClient
    from rafrx.terminal import TerminalRenderer
    from rafrx.testing import RecordedRequest, ServerResponse

__all__ = ["DEMO_PROMPT", "build_parser", "demo_script", "demo_tools", "main"]

FORMATS = ("openai-chat", "anthropic", "openai-responses")

#: What the demo asks.
DEMO_PROMPT = "What's the weather in Paris? Save me a short note about it."

_NOTE = "\n".join(
    [
        "# Paris, today",
        "",
        "Sunny, 21 °C, a light breeze from the west (12 km/h).",
        "",
        *(
            f"- {hour:02d}:00 — {temp} °C, {sky}; a good hour for {plan}."
            for hour, temp, sky, plan in [
                (8, 15, "clear", "a walk along the Seine"),
                (9, 16, "clear", "coffee on a terrace in the Marais"),
                (10, 17, "clear", "the Musée d'Orsay before the queues"),
                (11, 18, "sunny", "the Tuileries garden"),
                (12, 19, "sunny", "lunch at a bistro in Saint-Germain"),
                (13, 20, "sunny", "a boat ride under the bridges"),
                (14, 21, "sunny", "the Louvre's sculpture courts"),
                (15, 21, "sunny", "ice cream on the Île Saint-Louis"),
                (16, 21, "a few clouds", "books at the stalls on the quays"),
                (17, 20, "a few clouds", "the view from Montmartre"),
                (18, 19, "clear", "an apéritif by the Canal Saint-Martin"),
                (19, 18, "clear", "dinner in the Latin Quarter"),
                (20, 17, "clear", "the Eiffel Tower lighting up"),
                (21, 16, "clear", "a last stroll home"),
            ]
        ),
        "",
        "Bring sunglasses; no umbrella needed. UV index 6 around midday, so sunscreen too.",
        "Tomorrow looks similar, a degree or two warmer, with clouds late in the afternoon.",
    ]
)


class _Fail(Exception):
    """A user error: one line on stderr and exit status ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------- the scripted demo


def demo_tools(files: dict[str, str] | None = None) -> list[Any]:
    """The demo's tools: ``get_weather`` and ``write_file`` (approval, in memory).

    Args:
        files: Where ``write_file`` stores what it writes (nothing touches the disk).
    """
    from rafrx.tools import tool

    store = {} if files is None else files

    @tool
    def get_weather(city: str) -> dict[str, Any]:
        """The current weather in a city.

        Args:
            city: The city's name.
        """
        return {"city": city, "temp_c": 21, "sky": "sunny", "wind_kmh": 12}

    @tool(requires_approval=True)
    def write_file(path: str, content: str) -> str:
        """Write a text file (kept in memory by the demo).

        Args:
            path: The file's name.
            content: The text to write.
        """
        store[path] = content
        return f"wrote {len(content.encode())} bytes to {path} (in memory)"

    return [get_weather, write_file]


def _text_of(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and "text" in b
        )
    return ""


def demo_script(speed: float = 1.0) -> Callable[[RecordedRequest], ServerResponse]:
    """The scripted model behind ``demo`` and ``serve``.

    Offered ``get_weather``/``write_file``, it thinks, says it will check,
    then calls both (the note streams a few KiB of arguments); given the
    tool results, it answers. Without those tools it answers plain text.

    Args:
        speed: How many times faster than the default pacing to stream.
    """
    from rafrx.testing import Reply, ToolCallSpec

    delay = 0.006 / speed

    def script(request: RecordedRequest) -> ServerResponse:
        if request.last_role == "tool":
            size = len(_NOTE.encode())
            text = (
                "It's 21 °C and sunny in Paris, with a light westerly breeze. "
                f"I saved a note with the hour-by-hour outlook to paris.md ({size} bytes)."
            )
            return Reply(text=text, chunk_size=6, delay=delay)
        if {"get_weather", "write_file"} <= set(request.tool_names):
            return Reply(
                reasoning="The user wants the weather in Paris and a note saved. "
                "I'll call get_weather, then write_file with a short summary.",
                text="Let me check the weather in Paris and save a note for you.",
                tool_calls=[
                    ToolCallSpec("get_weather", {"city": "Paris"}),
                    ToolCallSpec("write_file", {"path": "paris.md", "content": _NOTE}),
                ],
                chunk_size=12,
                delay=delay,
            )
        said = _text_of(request.messages[-1]) if request.messages else ""
        return Reply(text=f"You said: {said}" if said else "Hello!", chunk_size=6, delay=delay)

    return script


def _client(fmt: str, base_url: str, model: str, api_key: str | None = None) -> LLMClient:
    from rafrx.sources.clients import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient

    classes: dict[str, type[LLMClient]] = {
        "openai-chat": OpenAIChatClient,
        "anthropic": AnthropicClient,
        "openai-responses": OpenAIResponsesClient,
    }
    try:
        return classes[fmt](base_url, api_key=api_key, model=model)
    except ValueError as exc:
        raise _Fail(f"invalid --base-url: {exc}") from None


async def _render_turn(
    renderer: TerminalRenderer, results: Any, *, agent_id: str | None = None
) -> Any:
    """Render ``results`` live and return their response; a stream that fails raises."""
    from reactivex import operators as rx

    from rafrx.operators._aggregate import collect_agent_response

    shown = results.pipe(rx.do_action(on_next=renderer.result))
    try:
        response = await collect_agent_response(shown, agent_id=agent_id)
    finally:
        renderer.close()
    renderer.response(response)
    return response


def _ended_in_error(response: AgentResponse) -> bool:
    """Whether the server ended the turn with an error it sent as a finish reason.

    OpenAI-compatible servers say so in the stream (``"finish_reason": "error"``,
    vLLM's ``"abort"``...), which ends it normally with :attr:`FinishReason.ERROR`;
    Anthropic and Responses send an error event, which fails the stream. Either
    way the turn failed.

    Example:
        >>> from rafrx.response import AgentResponse, FinishReason
        >>> _ended_in_error(AgentResponse(finish_reason=FinishReason.ERROR))
        True
    """
    from rafrx.response import FinishReason

    return response.finish_reason is FinishReason.ERROR


async def _demo(args: argparse.Namespace) -> int:
    from rafrx.agent import Agent
    from rafrx.errors import RafrxError
    from rafrx.terminal import TerminalRenderer
    from rafrx.testing import LLMServer

    if args.record and not Path(args.record).resolve().parent.is_dir():
        raise _Fail(f"cannot record to {args.record}: no such directory")
    if args.record and Path(args.record).is_dir():
        raise _Fail(f"cannot record to {args.record}: it is a directory")
    renderer = TerminalRenderer(sys.stdout, color=False if args.plain else None)

    async def approve(event: ToolApprovalRequestEvent) -> bool:
        renderer.note(f"approved {event.name} automatically (demo)")
        return True

    async with LLMServer() as server:
        server.script(demo_script(args.speed))
        client = _client(args.format, server.url, "rafrx-demo")
        agent: Agent = Agent(client, tools=demo_tools(), approver=approve, id="demo")
        renderer.note(f"rafrx demo · {args.format} · scripted server at {server.url}")
        renderer.note(f"you: {args.prompt}", bold=True)
        turn = agent.run(args.prompt)
        if args.record:
            from rafrx.recorder import record

            turn = record(turn, args.record)
        try:
            response = await _render_turn(renderer, turn, agent_id=agent.id)
        except RafrxError as exc:
            renderer.error(exc)
            return 1
        finally:
            await client.aclose()
    return 1 if _ended_in_error(response) else 0


# ----------------------------------------------------------------- replay


def _print_json(result: AgentResponseResult) -> None:
    import attrs

    from rafrx.recorder import encode_value

    for item in (*result.events, *result.contents):
        data = encode_value(item)
        for field in attrs.fields(type(item)):  # every key, defaults too: stable rows for jq
            if field.name not in data:
                data[field.name] = encode_value(getattr(item, field.name))
        data.pop("meta", None)  # the same for every item of a call; the events carry it
        line = {"type": data.pop("$type"), **data}
        print(json.dumps(line, allow_nan=False), flush=False)  # ASCII: lossless on any stdout


async def _replay(args: argparse.Namespace) -> int:
    from reactivex import operators as rx

    from rafrx.errors import RafrxError, error_text
    from rafrx.notebook import as_results
    from rafrx.operators._aggregate import collect_agent_response
    from rafrx.recorder import replay
    from rafrx.terminal import TerminalRenderer

    path = Path(args.file)
    if not path.is_file():
        raise _Fail(f"no such file: {path}")
    if args.dialect is not None and path.suffix.lower() == ".jsonl":
        raise _Fail(f"--dialect is for .sse files: {path} is a recording of decoded items")
    try:
        source = replay(
            path,
            pacing=args.pace,
            speed=args.speed,
            dialect=args.dialect or ("auto" if path.suffix.lower() == ".sse" else None),
        )
    except (OSError, ValueError) as exc:
        raise _Fail(f"cannot read {path}: {exc}") from None
    results = as_results(source)
    try:
        if args.json:
            response = await collect_agent_response(results.pipe(rx.do_action(on_next=_print_json)))
            return 1 if _ended_in_error(response) else 0
        renderer = TerminalRenderer(sys.stdout, color=False if args.plain else None)
        try:
            response = await _render_turn(renderer, results)
        except RafrxError as exc:
            renderer.error(exc)
            return 1
    except RafrxError as exc:
        _complain(f"rafrx replay: stream failed: {type(exc).__name__}: {error_text(exc)}")
        return 1
    return 1 if _ended_in_error(response) else 0


# ----------------------------------------------------------------- chat


async def _read_line(prompt: str) -> str | None:
    """The next stdin line (``None`` at end of input), read without blocking the loop.

    A daemon thread reads, not the loop's executor: on Ctrl-C the process
    exits at once instead of waiting for a line.
    """
    if sys.stdin is None:  # file descriptor 0 is closed: no input, as at its end
        return None
    if prompt and sys.stdin.isatty():
        print(prompt, end="", flush=True)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def deliver(line: str | Exception) -> None:
        if future.done():
            return
        if isinstance(line, Exception):
            future.set_exception(line)
        else:
            future.set_result(line)

    def read() -> None:
        line: str | Exception
        try:
            line = sys.stdin.readline()
        except Exception as exc:  # e.g. stdin closed under us: the awaiting chat says so
            line = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
            loop.call_soon_threadsafe(deliver, line)

    threading.Thread(target=read, name="rafrx-stdin", daemon=True).start()
    line = await future
    return line if line else None


async def _chat(args: argparse.Namespace) -> int:
    from rafrx.errors import IdleTimeout, RafrxError, StreamInterrupted, TransportError
    from rafrx.messages import ChatMessage, paired
    from rafrx.operators import convert
    from rafrx.terminal import TerminalRenderer

    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise _Fail(f"environment variable {args.api_key_env} is not set")
    client = _client(args.format, args.base_url, args.model, api_key)
    history: list[ChatMessage] = [ChatMessage.system(args.system)] if args.system else []
    turns = failed = 0
    try:
        while (line := await _read_line("you> ")) is not None:
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                break
            messages = [*history, ChatMessage.user(text)]
            renderer = TerminalRenderer(sys.stdout, color=False if args.plain else None)
            turns += 1
            try:
                response = await _render_turn(renderer, client.stream(messages).pipe(convert()))
            except RafrxError as exc:
                unreachable = not isinstance(exc, StreamInterrupted | IdleTimeout)  # vs broke off
                if isinstance(exc, TransportError) and unreachable:
                    raise _Fail(f"endpoint unreachable: {exc}") from None
                renderer.error(exc)
                failed += 1
                continue
            if _ended_in_error(response):  # as a stream that failed: the turn is not kept
                failed += 1
                continue
            # A reply may call a tool (chat offers none, but a model or a gateway may):
            # every provider refuses a history with a call and no result after it.
            history = paired([*messages, *response.turn_transcript])
    finally:
        await client.aclose()
    return 1 if turns and failed == turns else 0  # every turn failed: tell the caller


# ----------------------------------------------------------------- serve


async def _serve(args: argparse.Namespace) -> int:
    from rafrx.testing import LLMServer

    server = LLMServer(args.host, args.port, keep_requests=0)  # runs for days: record none
    server.script(demo_script(args.speed))
    try:
        await server.start()
    except OSError as exc:
        raise _Fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # (Windows' loops:
            loop.add_signal_handler(sig, stop.set)  # Ctrl-C ends it as KeyboardInterrupt)
    print(f"rafrx scripted LLM server listening on {server.url}", flush=True)
    print(
        "  POST /v1/chat/completions (OpenAI chat) · /v1/messages (Anthropic)"
        ' · /v1/responses (OpenAI Responses), "stream": true only — Ctrl-C to stop',
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await server.close()
    print(f"stopped after {server.request_count} request(s)", flush=True)
    return 0


# ----------------------------------------------------------------- argument parsing


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (and exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {port}")
    return port


def _dialects() -> tuple[str, ...]:
    """What ``--dialect`` takes: ``auto``, then each dialect registered in
    :data:`rafrx.sources.dialects.DIALECTS` (one added there is offered too)."""
    from rafrx.sources.dialects import DIALECTS

    return ("auto", *DIALECTS)


def build_parser() -> argparse.ArgumentParser:
    """The ``rafrx`` argument parser (subcommands ``demo``, ``replay``, ``chat``, ``serve``)."""
    parser = _Parser(
        prog="rafrx",
        description="rafrx: a streaming message model for LLM agents, on ReactiveX.",
    )
    from rafrx import __version__

    parser.add_argument("--version", action="version", version=f"rafrx {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

    demo = commands.add_parser(
        "demo",
        help="an agent turn with tools against the embedded scripted server, rendered live",
        description="Start the embedded scripted LLM server and run an agent turn with two "
        "tools (get_weather, write_file with a long argument), rendered live. "
        "No network, no API key.",
    )
    demo.add_argument("--format", choices=FORMATS, default="openai-chat", help="wire format")
    demo.add_argument("--plain", action="store_true", help="no colours or in-place updates")
    demo.add_argument("--prompt", default=DEMO_PROMPT, help="what to ask")
    demo.add_argument("--speed", type=_positive, default=1.0, help="stream this many times faster")
    demo.add_argument(
        "--record", metavar="FILE", default=None, help="also save the turn as JSON lines"
    )

    replay = commands.add_parser(
        "replay",
        help="run a recorded stream through the pipeline and show it",
        description="Decode a recorded .sse body (or replay a .jsonl recording) and show "
        "the stream as the pipeline sees it.",
    )
    replay.add_argument("file", help="a .sse file (raw body) or a .jsonl recording")
    replay.add_argument(
        "--dialect", choices=_dialects(), default=None, help="for .sse files (default: auto)"
    )
    replay.add_argument("--json", action="store_true", help="print JSON lines of contents")
    replay.add_argument("--pace", action="store_true", help="keep the recorded timing")
    replay.add_argument("--speed", type=_positive, default=1.0, help="with --pace: speed-up")
    replay.add_argument("--plain", action="store_true", help="no colours or in-place updates")

    chat = commands.add_parser(
        "chat",
        help="chat with an OpenAI-compatible, Anthropic or Responses endpoint",
        description="An interactive chat: each stdin line is a user message; the reply "
        "streams live. /exit or end of input stops.",
    )
    chat.add_argument("--base-url", required=True, help="e.g. https://api.openai.com")
    chat.add_argument("--model", required=True, help="the model name")
    chat.add_argument(
        "--api-key-env", metavar="VAR", default=None, help="environment variable with the key"
    )
    chat.add_argument("--format", choices=FORMATS, default="openai-chat", help="wire format")
    chat.add_argument("--system", default=None, help="a system message")
    chat.add_argument("--plain", action="store_true", help="no colours or in-place updates")

    serve = commands.add_parser(
        "serve",
        help="run the scripted LLM server until Ctrl-C",
        description="Run the embedded scripted LLM server (OpenAI chat, Anthropic and "
        'Responses endpoints; tools or text answers; streaming requests only, "stream": true) '
        "until Ctrl-C.",
    )
    serve.add_argument("--port", type=_port, default=8765, help="0 picks a free port")
    serve.add_argument("--host", default="127.0.0.1", help="the interface to listen on")
    serve.add_argument("--speed", type=_positive, default=1.0, help="stream this much faster")
    return parser


_COMMANDS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "demo": _demo,
    "replay": _replay,
    "chat": _chat,
    "serve": _serve,
}


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (assumed so where poll() cannot tell)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() (Windows), or no file descriptor
        return True


def _complain(line: str) -> None:
    """Print ``line`` to stderr with its control characters made inert: it may quote
    a provider (an error message of a stream) or a file name."""
    from rafrx.terminal import inert

    print(inert(line), file=sys.stderr)


class _StderrWarnings(logging.Handler):
    """rafrx's warnings on stderr, one inert line each (they may quote a provider)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        _complain(f"rafrx: {record.levelname.lower()}: {record.getMessage()}")


@contextlib.contextmanager
def _warnings_shown() -> Iterator[None]:
    """Show rafrx's warnings on stderr while the command runs, unless the program
    configured logging itself: the library's loggers only have a ``NullHandler``."""
    if logging.getLogger().handlers:
        yield
        return
    logger, handler = logging.getLogger("rafrx"), _StderrWarnings()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rafrx`` command line; returns the exit status."""
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
    with contextlib.suppress(AttributeError, ValueError):  # bytes typed in another encoding
        sys.stdin.reconfigure(errors="replace")  # type: ignore[union-attr]
    args = build_parser().parse_args(argv)
    with _warnings_shown():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command, turning its failures into a line on stderr and a status."""
    try:
        return int(asyncio.run(_COMMANDS[args.command](args)))
    except _Fail as exc:
        _complain(f"rafrx {args.command}: error: {exc}")
        return exc.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as exc:
        if not _stdout_closed():  # another pipe: e.g. the error a recording replays
            _complain(f"rafrx {args.command}: error: {type(exc).__name__}: {exc}")
            return 1
        devnull = os.open(os.devnull, os.O_WRONLY)  # e.g. `rafrx replay --json FILE | head`
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:  # the CLI promises no tracebacks
        if os.environ.get("RAFRX_DEBUG"):
            raise
        _complain(
            f"rafrx {args.command}: error: {type(exc).__name__}: {exc}"
            " (set RAFRX_DEBUG=1 for the traceback)"
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
