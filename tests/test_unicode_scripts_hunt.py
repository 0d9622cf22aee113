"""Unicode hunt, round 2: a user writing in every script and emoji, end to end.

Chinese, Japanese, Arabic and Hebrew (RTL), Hindi and Thai with their combining vowel
signs, ZWJ families, skin tones, flags, astral characters, NFD text, BOMs, U+2028/2029
and NUL go through every layer: the local LLMServer over real HTTP in all three wire
formats (both ways: the request the server parsed, the stream it sent back), streamed
tool arguments (values, keys, escapes split at every offset, the progress byte
counts), the wire conversions and ``to_dict``/``from_dict``, the recorder, the
terminal, the notebook HTML and the CLI under odd output encodings and a C locale.

What must hold everywhere: no character is lost, doubled, reordered, normalised or
mis-counted; nothing raises. (tests/test_unicode_hunt.py, round 1, covers lone
surrogates, invalid UTF-8, charsets of error bodies and bidi controls.)
"""

from __future__ import annotations

import html
import io
import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import reactivex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reactivex import operators as rx

from rafrx import Agent, ChatMessage, collect_agent_response, content, convert, from_sse, tool
from rafrx import updates as u
from rafrx.history import InMemoryHistoryProvider
from rafrx.json_stream import ArgMember, ArgProgress, StreamingArgsParser
from rafrx.messages import ToolCall, from_anthropic, to_anthropic, to_openai_chat
from rafrx.notebook import LiveState, content_html, live_html, live_text
from rafrx.operators import aggregate
from rafrx.recorder import record, replay
from rafrx.response import AgentResponseResult, FinishReason
from rafrx.sources.clients import (
    AnthropicClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    to_responses_input,
)
from rafrx.terminal import TerminalRenderer
from rafrx.testing import LLMServer, Reply, ToolCallSpec

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = [OpenAIChatClient, AnthropicClient, OpenAIResponsesClient]

# Every script and emoji a user writes in (all valid scalar values, no controls but NUL).
WORLD = {
    "zh": "你好\uff0c世界\uff01今天天气怎么样\uff1f",  # fullwidth punctuation
    "ja": "こんにちは、カタカナ・ﾊﾝｶｸ・漢字",
    "ar": "مرحبا بالعالم ١٢٣",
    "he": "שָׁלוֹם עוֹלָם",
    "hi": "नमस्ते दुनिया, क्षत्रिय",
    "th": "สวัสดีชาวโลก",
    "nfd": unicodedata.normalize("NFD", "Ça résonne: café, naïve, Ångström"),
    "zwj": "👩\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 👨🏽\u200d💻",
    "skin": "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "flags": "🇫🇷🇯🇵🇮🇳🇮🇱",
    "astral": "𝄞 \U0001d54f 𠀀 🀄 \U0010fffd",  # (double-struck X)
    "seps": "a\u2028b\u2029c\x85d",
    "bom_nul": "\ufeffmid\x00nul",
    "vs": "☺︎ ☺️ 1️⃣",
}
ALL_TEXT = " | ".join(WORLD.values())

# Text a display keeps as it is: no C0/C1 controls but tab and newline, no bidi
# controls, no surrogates, no non-characters (what inert()/showable() replace).
_SHOWN = st.characters(
    exclude_categories=["Cs", "Cc", "Co", "Cn"],
    exclude_characters="\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
)
SHOWN_WORLD = [text.replace("\x00", "").replace("\x85", "") for text in WORLD.values()]
shown_text = st.lists(
    st.one_of(st.sampled_from(SHOWN_WORLD), st.text(_SHOWN, max_size=8)), max_size=6
).map("".join)
# Any valid text (what JSON carries without a lone surrogate).
any_text = st.lists(
    st.one_of(
        st.sampled_from(list(WORLD.values())), st.text(st.characters(exclude_categories=["Cs"]))
    ),
    max_size=6,
).map("".join)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def chat_body(*deltas: dict[str, Any], finish: str = "stop") -> bytes:
    out = b""
    for delta in deltas:
        chunk = {"choices": [{"index": 0, "delta": delta}]}
        out += b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    return out + b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n"


def call_body(pieces: list[str], name: str = "echo") -> bytes:
    deltas = []
    for i, piece in enumerate(pieces):
        call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
        if i == 0:
            call.update(id="call_1", type="function")
            call["function"]["name"] = name
        deltas.append({"tool_calls": [call]})
    return chat_body(*deltas, finish="tool_calls")


def contents_of(body: bytes | list[bytes], dialect: str = "openai-chat") -> list[Any]:
    results = from_sse(body, dialect).pipe(convert(), rx.to_list()).run()
    return [item for result in results for item in result.contents]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "rafrx", *args],
        input=b"",
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        check=False,
    )


# ======================================================== 1. the LLMServer, both ways


got: list[dict[str, str]] = []


@tool
def lookup(città: str, 名前: str, emoji: str) -> str:
    """Look a place up.

    Args:
        città: The city, in its own script.
        名前: The person's name.
        emoji: An emoji sequence.
    """
    got.append({"città": città, "名前": 名前, "emoji": emoji})
    return f"{名前} → {città} {emoji}"


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", CLIENTS)
async def test_every_script_streams_back_exactly_one_character_per_delta(
    llm_server: LLMServer, cls: Any
) -> None:
    """Text and reasoning in every script, one character per delta: nothing is split,
    joined, normalised (NFD stays NFD) or reordered; the request carried them exactly."""
    llm_server.enqueue(Reply(text=ALL_TEXT, reasoning=WORLD["hi"] + WORLD["zwj"], chunk_size=1))
    client = cls(llm_server.url, model="模型-😀")
    try:
        response = await collect_agent_response(
            client.stream([ChatMessage.system(WORLD["he"]), ChatMessage.user(ALL_TEXT)]).pipe(
                convert()
            )
        )
    finally:
        await client.aclose()
    assert response.text == ALL_TEXT
    assert response.turn_transcript[-1].content == ALL_TEXT
    assert response.turn_transcript[-1].reasoning == WORLD["hi"] + WORLD["zwj"]
    sent = json.dumps(llm_server.requests[0].json, ensure_ascii=False)
    assert json.dumps(ALL_TEXT, ensure_ascii=False) in sent
    assert json.dumps(WORLD["he"], ensure_ascii=False) in sent
    assert llm_server.requests[0].json["model"] == "模型-😀"


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", CLIENTS)
async def test_a_tool_with_non_ascii_parameters_gets_its_arguments_exactly(
    llm_server: LLMServer, cls: Any
) -> None:
    """Non-ASCII parameter names (Python allows them) in the schema the server got, the
    model's arguments in every script streamed one character at a time, the tool
    called with them exactly, its result sent back exactly."""
    got.clear()
    arguments = {"città": WORLD["ar"], "名前": WORLD["ja"], "emoji": WORLD["zwj"] + WORLD["flags"]}
    llm_server.enqueue(
        Reply(tool_calls=[ToolCallSpec("lookup", arguments)], chunk_size=1),
        Reply(text=WORLD["zh"]),
    )
    client = cls(llm_server.url, model="m")
    history = InMemoryHistoryProvider()
    try:
        response = await Agent(client, tools=[lookup], history=history).send(WORLD["nfd"])
    finally:
        await client.aclose()
    assert got == [arguments]
    assert response.text.endswith(WORLD["zh"])
    first = json.dumps(llm_server.requests[0].json, ensure_ascii=False)
    for key in ("città", "名前", "The person's name."):
        assert key in first
    second = json.dumps(llm_server.requests[1].json, ensure_ascii=False)
    assert json.dumps(f"{WORLD['ja']} → {WORLD['ar']} {arguments['emoji']}")[1:-1] in (
        json.dumps(llm_server.requests[1].json)
    )
    assert json.dumps(WORLD["nfd"], ensure_ascii=False)[1:-1] in second


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", CLIENTS)
async def test_progress_of_a_streamed_argument_counts_utf8_bytes_over_http(
    llm_server: LLMServer, cls: Any
) -> None:
    """The progress ``received`` of a long non-ASCII argument is its UTF-8 size, in every
    wire format, and the fragments add up to the value."""
    value = (WORLD["hi"] + WORLD["skin"] + WORLD["astral"]) * 3
    llm_server.enqueue(Reply(tool_calls=[ToolCallSpec("lookup", {"città": value})], chunk_size=5))
    client = cls(llm_server.url, model="m")
    try:
        results = await client.stream([ChatMessage.user("x")], tools=[lookup]).pipe(
            convert(), rx.to_list()
        )
    finally:
        await client.aclose()
    items = [i for r in results for i in r.contents]
    progress = [i for i in items if isinstance(i, content.ToolCallArgsProgressContent)]
    assert "".join(p.value for p in progress) == value
    assert progress[-1].received == utf8_len(value)
    assert [p.received for p in progress] == sorted(p.received for p in progress)


# ======================================================== 2. streamed arguments


keys = st.one_of(st.sampled_from(["città", "名前", "😀", "שם", "नाम", "🇫🇷", ""]), any_text)
values = st.one_of(any_text, st.integers(), st.lists(any_text, max_size=3), st.none())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    obj=st.dictionaries(keys, values, max_size=4),
    ascii_json=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=12),
)
def test_any_object_with_non_ascii_keys_split_anywhere_parses_as_json_loads(
    obj: dict[str, Any], ascii_json: bool, cuts: list[int]
) -> None:
    text = json.dumps(obj, ensure_ascii=ascii_json)
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    parser = StreamingArgsParser()
    events = [e for piece in pieces for e in parser.feed(piece)]
    assert parser.close() == json.loads(text)
    assert {e.name: e.value for e in events if isinstance(e, ArgMember)} == obj
    for key, value in obj.items():
        grew = [e for e in events if isinstance(e, ArgProgress) and e.name == key]
        if isinstance(value, str) and value:
            assert "".join(e.fragment for e in grew) == value
            assert grew[-1].received == utf8_len(value)
        for e in grew:
            e.fragment.encode("utf-8")  # whole code points
            e.name.encode("utf-8")


ESCAPED = '{"名\\u524d": "\\ud83d\\ude00\\u00e9\\ud834\\udd1e", "k": "e\\u0301\\u2028"}'


@pytest.mark.parametrize("at", range(1, len(ESCAPED)))
def test_escapes_split_at_every_offset_give_the_same_members(at: int) -> None:
    """``\\u`` + ``d83d`` + ``\\ude00`` in separate fragments: the pair never splits."""
    parser = StreamingArgsParser()
    events = parser.feed(ESCAPED[:at]) + parser.feed(ESCAPED[at:])
    members = {e.name: e.value for e in events if isinstance(e, ArgMember)}
    assert members == json.loads(ESCAPED) == {"名前": "😀é𝄞", "k": "e\u0301\u2028"}
    grew = [e for e in events if isinstance(e, ArgProgress) and e.name == "名前"]
    assert "".join(e.fragment for e in grew) == "😀é𝄞"
    assert grew[-1].received == utf8_len("😀é𝄞") == 10


def test_three_way_split_of_an_escaped_pair_through_the_chat_dialect() -> None:
    items = contents_of(call_body(['{"名前": "a\\u', "d83d", "\\ude00", '🇫🇷"}']))
    calling = next(i for i in items if isinstance(i, content.ToolCallingContent))
    progress = [i for i in items if isinstance(i, content.ToolCallArgsProgressContent)]
    assert calling.arguments == {"名前": "a😀🇫🇷"}
    assert [p.value for p in progress] == ["a", "😀", "🇫🇷"]
    assert [p.received for p in progress] == [1, 5, 13]


def test_invalid_utf8_inside_arguments_becomes_u_fffd_and_the_call_still_parses() -> None:
    body = call_body(['{"s": "a', "REPLACE", 'b"}'])
    body = body.replace(b"REPLACE", b"\xe4\xbd")  # half of a CJK character, then a quote
    calling = next(i for i in contents_of(body) if isinstance(i, content.ToolCallingContent))
    assert calling.arguments == {"s": "a\ufffdb"}
    assert calling.error is None


@pytest.mark.parametrize("cut", range(1, 12))
def test_a_cjk_character_split_at_every_byte_across_sse_chunks(cut: int) -> None:
    body = chat_body({"content": "字😀"}, {"content": "ह\u093f"})
    at = body.index("字".encode()) + cut % 7  # a cut in 字 (3 bytes) or 😀 (4 bytes)
    response = from_sse([body[:at], body[at:]]).pipe(convert(), aggregate()).run()
    assert response.text == "字😀हि"


# ======================================================== 3. wire conversions


@settings(max_examples=60, deadline=None)
@given(user=any_text, said=any_text, key=keys, result=any_text, call_id=any_text)
def test_messages_in_any_script_round_trip_through_every_wire_form(
    user: str, said: str, key: str, result: str, call_id: str
) -> None:
    messages = [
        ChatMessage.user(user or "x"),
        ChatMessage.assistant_with_tools(said, [ToolCall(call_id or "c", "f", {key: user})]),
        ChatMessage.tool(result or "r", call_id or "c"),
    ]
    for message in messages:
        for ascii_json in (True, False):
            stored = json.dumps(message.to_dict(), ensure_ascii=ascii_json)
            assert ChatMessage.from_dict(json.loads(stored)) == message
    chat = [ChatMessage.from_openai(m) for m in json.loads(json.dumps(to_openai_chat(messages)))]
    assert chat[0].content == (user or "x")
    assert chat[1].tool_calls is not None
    assert chat[1].tool_calls[0].arguments == {key: user}
    assert chat[2].content == (result or "r")
    system, wire = to_anthropic(messages)
    back = from_anthropic(system, json.loads(json.dumps(wire)))
    assert back[-1].content == (result or "r")
    assert back[1].tool_calls is not None
    assert back[1].tool_calls[0].arguments == {key: user}
    assert back[1].tool_calls[0].id == back[-1].tool_call_id  # still paired
    responses = json.dumps(to_responses_input(messages), ensure_ascii=False)
    assert json.dumps(user or "x", ensure_ascii=False)[1:-1] in responses


def test_call_ids_differing_only_in_non_ascii_stay_distinct_and_paired_for_anthropic() -> None:
    """Anthropic takes ``^[a-zA-Z0-9_-]+$`` ids: ``天气`` and ``工具`` both become
    underscores, yet each call keeps its own result."""
    messages = [
        ChatMessage.user("q"),
        ChatMessage.assistant_with_tools(
            "", [ToolCall("天气", "weather", {}), ToolCall("工具", "tool", {})]
        ),
        ChatMessage.tool("sunny", "天气"),
        ChatMessage.tool("done", "工具"),
    ]
    _, wire = to_anthropic(messages)
    uses = [b for m in wire for b in m["content"] if b["type"] == "tool_use"]
    answers = [b for m in wire for b in m["content"] if b["type"] == "tool_result"]
    assert len({b["id"] for b in uses}) == 2
    assert all(b["id"].isascii() and b["id"].replace("_", "a").isalnum() for b in uses)
    by_id = {b["tool_use_id"]: b["content"] for b in answers}
    assert [by_id[b["id"]] for b in uses] == ["sunny", "done"]


# ======================================================== 4. recorder


@settings(max_examples=30, deadline=None)
@given(deltas=st.lists(any_text, min_size=1, max_size=6), args=any_text)
def test_recorder_replays_any_script_exactly(
    tmp_path_factory: pytest.TempPathFactory, deltas: list[str], args: str
) -> None:
    path = tmp_path_factory.mktemp("rec") / "turn.jsonl"
    raw_args = json.dumps({"名前": args}, ensure_ascii=False)
    source = reactivex.from_iterable(
        [
            *(u.TextDelta(d) for d in deltas),
            u.ToolCallStart("呼び出し", "lookup"),
            u.ToolCallArgs("呼び出し", raw_args),
            u.ToolCallEnd("呼び出し"),
            u.Finish(FinishReason.TOOL_CALLS),
        ]
    )
    record(source, path).pipe(rx.to_list()).run()
    path.read_bytes().decode("utf-8")
    back = replay(path).pipe(rx.to_list()).run()
    assert [d.delta for d in back if isinstance(d, u.TextDelta)] == deltas
    assert [d.args_delta for d in back if isinstance(d, u.ToolCallArgs)] == [raw_args]
    assert [d.id for d in back if isinstance(d, u.ToolCallStart)] == ["呼び出し"]


@pytest.mark.parametrize("ascii_json", [True, False])
def test_recorder_redacts_a_non_ascii_secret_in_arguments_split_and_escaped(
    tmp_path: Path, ascii_json: bool
) -> None:
    secret = "clé-secrète-😀-42"
    inner = json.dumps(secret, ensure_ascii=ascii_json)[1:-1]
    path = tmp_path / "turn.jsonl"
    source = reactivex.of(
        u.ToolCallStart("c1", "f"),
        u.ToolCallArgs("c1", '{"k": "' + inner[:9]),
        u.ToolCallArgs("c1", inner[9:] + '"}'),
        u.ToolCallEnd("c1"),
        u.Finish(FinishReason.TOOL_CALLS),
    )
    record(source, path, secrets=[secret]).pipe(rx.to_list()).run()
    text = path.read_text(encoding="utf-8")
    assert secret not in text
    assert inner[9:] not in text
    assert json.dumps(inner)[1:-1] not in text
    assert "[REDACTED]" in text


# ======================================================== 5. terminal and notebook


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(shown_text, min_size=1, max_size=6))
def test_terminal_plain_output_is_the_text_itself_for_any_script(pieces: list[str]) -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    for piece in pieces:
        renderer.result(AgentResponseResult(contents=[content.TextContent(piece)]))
    renderer.close()
    text = "".join(pieces)
    assert out.getvalue() == (text + "\n" if text else "")


def test_terminal_joins_a_pair_split_in_reasoning_and_keeps_rtl_and_combining_marks() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    for piece in (WORLD["he"], " a\ud83d", "\ude00 ", WORLD["hi"]):
        renderer.result(AgentResponseResult(contents=[content.ReasoningContent(piece)]))
    renderer.close()
    assert out.getvalue() == f"[thinking] {WORLD['he']} a😀 {WORLD['hi']}\n"


def test_terminal_shows_non_ascii_tool_names_arguments_and_results_on_one_line() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, color=False)
    renderer.result(
        AgentResponseResult(
            contents=[
                content.ToolCallStartContent("呼1", "lookup"),
                content.ToolCallArgsParsedContent("呼1", "名前", WORLD["ar"] + "\u2028x"),
                content.ToolCalledContent("呼1", WORLD["zwj"] + "\n" + WORLD["flags"]),
            ]
        )
    )
    renderer.close()
    lines = out.getvalue().splitlines()
    assert lines == [
        "[tool] lookup (呼1)",
        f'  名前 = "{WORLD["ar"]}\\u2028x"',
        f"[ok] lookup → {WORLD['zwj']}\\n{WORLD['flags']}",
    ]


@settings(max_examples=60, deadline=None)
@given(text=shown_text)
def test_notebook_html_of_any_script_unescapes_to_the_text(text: str) -> None:
    page = content_html(content.TextContent(text))
    assert "\ufffd" not in page or "\ufffd" in text
    inner = page[page.index(">") + 1 : page.rindex("<")]
    assert html.unescape(inner) == text
    page.encode("utf-8")


def test_the_live_view_shows_every_script_as_it_streamed() -> None:
    state = LiveState()
    for ch in ALL_TEXT.replace("\x00", "").replace("\x85", ""):
        state.add(AgentResponseResult(contents=[content.TextContent(ch)]))
    shown = ALL_TEXT.replace("\x00", "").replace("\x85", "")
    assert state.text == shown
    assert html.escape(WORLD["zwj"]) in live_html(state)
    assert WORLD["nfd"] in live_text(state)


# ======================================================== 6. CLI under odd encodings


@pytest.fixture(scope="module")
def world_sse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    deltas = [{"content": ch} for ch in ALL_TEXT]
    path = tmp_path_factory.mktemp("cli") / "world.sse"
    path.write_bytes(chat_body({"reasoning_content": WORLD["th"]}, *deltas))
    return path


def test_cli_replay_prints_every_script_exactly_in_utf8(world_sse: Path) -> None:
    done = run_cli("replay", str(world_sse), "--plain", env={"PYTHONIOENCODING": "utf-8"})
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")
    # the CLI shows NUL and NEL (controls) as U+FFFD and keeps everything else
    assert ALL_TEXT.replace("\x00", "\ufffd").replace("\x85", "\ufffd") in out
    assert WORLD["th"] in out


@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONIOENCODING": "ascii"},
        {"PYTHONIOENCODING": "latin-1"},
        {"PYTHONIOENCODING": "cp1252"},
        {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": ""},
    ],
)
def test_cli_replay_never_crashes_on_an_encoding_that_cannot_show_the_text(
    world_sse: Path, env: dict[str, str]
) -> None:
    done = run_cli("replay", str(world_sse), "--plain", env=env)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    assert b"finish: stop" in done.stdout
    assert b"|" in done.stdout  # the ASCII around the text got through


def test_cli_replay_in_the_c_locale_writes_utf8(world_sse: Path) -> None:
    """PEP 538/540: the C locale gives UTF-8 output, not question marks."""
    env = {"LC_ALL": "C", "PYTHONIOENCODING": "", "PYTHONUTF8": ""}
    done = run_cli("replay", str(world_sse), "--plain", env=env)
    assert done.returncode == 0, done.stderr
    assert WORLD["zwj"] in done.stdout.decode("utf-8")


@pytest.mark.parametrize("encoding", ["ascii", "utf-8"])
def test_cli_replay_json_lines_give_back_every_character(world_sse: Path, encoding: str) -> None:
    done = run_cli("replay", str(world_sse), "--json", env={"PYTHONIOENCODING": encoding})
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.decode(encoding).splitlines() if line]
    text = "".join(r["text"] for r in rows if r.get("type") == "TextContent")
    assert text == ALL_TEXT
