"""Write seed corpora for the fuzz targets from the recorded fixtures.

``python fuzz/seed_corpus.py`` fills ``fuzz/corpus/sse`` (each fixture body,
prefixed by the bytes that select its dialect and no cuts) and
``fuzz/corpus/args`` (the tool-call arguments found in the fixtures).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent
FIXTURES = ROOT.parent / "tests" / "data" / "fixtures"
DIALECTS = ("openai-chat", "anthropic", "openai-responses")


def _write(folder: Path, data: bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def main() -> None:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text("utf-8"))
    sse, args = ROOT / "corpus" / "sse", ROOT / "corpus" / "args"
    for entry in manifest:
        if entry["format"] not in DIALECTS:
            continue
        body = (FIXTURES / entry["path"]).read_bytes()
        # FuzzedDataProvider reads integers from the end of the input: the
        # dialect index, then the number of cuts (0)
        _write(sse, body + bytes([0, DIALECTS.index(entry["format"])]))
        for call in entry["expected"]["tool_calls"]:
            _write(args, call["arguments_raw"].encode() + b"\0")
    print(f"{len(list(sse.iterdir()))} SSE seeds, {len(list(args.iterdir()))} argument seeds")


if __name__ == "__main__":
    main()
