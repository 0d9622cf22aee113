"""Every notebook in notebooks/ runs top to bottom (nbclient, no network) and shows its results.

The four notebooks execute concurrently, once per session, each in its own
python3 kernel; the tests then check a key output of each.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = [
    "01-quickstart.ipynb",
    "02-custom-operators.ipynb",
    "03-tools-and-agents.ipynb",
    "04-providers.ipynb",
]
CELL_TIMEOUT = 90


async def _execute(name: str) -> Any:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    fresh = copy.deepcopy(notebook)
    for cell in fresh.cells:  # run from a clean slate, not from the committed outputs
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(
        fresh,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        coalesce_streams=True,  # one print may arrive as several stream messages under load
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    await client.async_execute()
    return fresh


@pytest.fixture(scope="module")
def executed() -> dict[str, Any]:
    async def run_all() -> list[Any]:
        return await asyncio.gather(*(_execute(name) for name in NAMES))

    return dict(zip(NAMES, asyncio.run(run_all()), strict=True))


def _outputs(notebook: Any) -> list[Any]:
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]


def _text(notebook: Any) -> str:
    """Everything the notebook printed or displayed as text or HTML."""
    parts: list[str] = []
    for output in _outputs(notebook):
        if output.output_type == "stream":
            parts.append(output.text)
        for kind in ("text/plain", "text/html", "image/svg+xml"):
            parts.append(output.get("data", {}).get(kind, ""))
    return "\n".join(parts)


def test_every_notebook_is_listed_and_committed_with_outputs() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == NAMES
    for name in NAMES:
        notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(notebook)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert code, name
        assert all(cell.execution_count is not None for cell in code), f"{name} not executed"
        assert not any(o.output_type == "error" for cell in code for o in cell.outputs), name


def test_quickstart_replays_subscribes_and_aggregates(executed: dict[str, Any]) -> None:
    notebook = executed["01-quickstart.ipynb"]
    text = _text(notebook)
    assert "Let me check the weather in Paris and save a note for you." in text
    assert "start      write_file (call_write_2)" in text
    assert "calling    write_file(path, content)" in text
    live = [o for o in _outputs(notebook) if o.output_type == "display_data"]
    assert len(live) == 1  # one display handle, updated in place
    html = live[0].data["text/html"]
    assert 'class="rafrx-live"' in html
    assert "status: done" in html  # the final render replaced the first one
    assert 'class="rafrx-timeline"' in text
    assert "IncompleteStream" in text
    assert "partial text: 'Let me check the weather in Paris and save a note for you.'" in text


def test_custom_operators_pass_their_marble_tests(executed: dict[str, Any]) -> None:
    text = _text(executed["02-custom-operators.ipynb"])
    assert "'Write to [email], or to [email].'" in text
    assert text.count("marble test passed") == 2
    assert "every split gives: Ping [email] and [email] today." in text
    assert "characters/s" in text


def test_agent_notebook_runs_tools_with_approval(executed: dict[str, Any]) -> None:
    notebook = executed["03-tools-and-agents.ipynb"]
    text = _text(notebook)
    assert "[('book_table', 'approved'), ('send_sms', 'denied')]" in text
    assert "booked Chez Janou at 19:30 for 2" in text
    assert "the user denied the call to tool 'send_sms'" in text
    assert "final answer: Here is what happened:" in text
    live = [o for o in _outputs(notebook) if o.output_type == "display_data"]
    assert len(live) == 1
    assert "status: done" in live[0].data["text/html"]
    assert "send_sms · call_" in text  # a timeline lane per tool call
    assert "(2, 'requests served')" in text


def test_providers_notebook_compares_the_three_formats(executed: dict[str, Any]) -> None:
    text = _text(executed["04-providers.ipynb"])
    assert "same text, reasoning, finish reason and tool calls in all three formats: True" in text
    for endpoint in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
        assert endpoint in text
    assert "ToolCallDelta" in text  # OpenAI chat's legacy deltas, in the comparison table
    assert "event: message_start" in text  # Anthropic's wire format, side by side


def test_notebook_code_is_lint_clean() -> None:
    import subprocess
    import sys

    for command in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command, str(NOTEBOOKS)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
