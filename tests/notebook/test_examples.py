"""Every notebook in examples/ runs under a real ipykernel through nbclient, offline, and its
outputs say what the notebook promises."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def execute(name: str, workdir: Path) -> list:
    notebook = nbformat.read(str(EXAMPLES / f"{name}.ipynb"), as_version=4)
    NotebookClient(notebook, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(workdir)}}).execute()
    return [c for c in notebook.cells if c.cell_type == "code"]


def shown(cell) -> str:
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("display_data", "execute_result"):
            parts.append(str(output.data.get("text/plain", "")))
        elif output.output_type == "error":
            parts.append(f"ERROR {output.ename}: {output.evalue}")
    return "\n".join(parts)


def status_json(cell) -> dict:
    text = shown(cell)
    return json.loads(text[text.index("{"):])


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


def test_every_example_is_tested():
    assert sorted(p.stem for p in EXAMPLES.glob("*.ipynb") if not p.stem.endswith(".out")) == [
        "long_session", "quickstart", "thinking"]


def test_quickstart_runs_offline_and_compacts_by_hand(tmp_path, offline):
    cells = execute("quickstart", tmp_path)
    everything = "\n".join(shown(c) for c in cells)
    assert "ERROR" not in everything
    assert "offline stand-in" in everything and "not Claude" in everything
    assert "min -1.000  max 0.995  mean 0.022" in everything  # the agent's code ran in the kernel
    assert "Compacted " in everything and "(manual)" in everything
    status = status_json(cells[-1])
    assert status["backend"] == "offline" and status["zone"] == "ok"
    assert [b["trigger"] for b in status["boundaries"]] == ["manual"]
    assert (tmp_path / ".ctx_magic" / "sessions" / status["session_id"] / "transcript.jsonl").is_file()


def test_long_session_shows_persisted_output_idle_clearing_and_compaction_from_notes(tmp_path, offline):
    cells = execute("long_session", tmp_path)
    everything = "\n".join(shown(c) for c in cells)
    assert "ERROR" not in everything
    assert "Saved a 59,999-character output to" in everything
    assert re.search(r"Cleared \d+ old tool results? after an idle gap", everything)
    assert "(session-memory)" in everything and "Compacted " in everything
    status = status_json(cells[-1])
    assert status["window"] == 20_000
    assert [b["trigger"] for b in status["boundaries"]] == ["session-memory"]  # the notes, no summary call
    assert all(b["tokens_after"] < b["tokens_before"] for b in status["boundaries"])
    assert status["breaker_open"] is False


def test_thinking_shows_collapsed_survives_the_tool_loops_and_a_model_switch_and_is_priced(tmp_path, offline):
    cells = execute("thinking", tmp_path)
    everything = "\n".join(shown(c) for c in cells)
    html = "\n".join(str(o.get("data", {}).get("text/html", "")) for c in cells for o in c.outputs)
    assert "ERROR" not in everything and "Stopped" not in everything
    assert '<details class="ctx-magic-thinking"><summary>Thinking</summary>' in html
    assert "{91: False, 97: True, 111: False}" in everything and "101" in everything  # both tool loops ran
    assert "that the new model cannot take" in everything  # the switch dropped Sonnet's blocks
    assert everything.count("this turn") == 3 and "$0.0" in everything
    status = status_json(cells[-1])
    assert status["thinking"]["type"] == "enabled" and status["model"] == "claude-opus-5-5"
    assert status["cost"]["session_usd"] > 0 and status["window_source"] == "models-api"


def test_the_readmes_first_command_runs_the_quickstart_and_leaves_a_visible_result(tmp_path, offline):
    """`python -m ctx_magic.demo` as a person runs it (here on a copy, so the checkout stays clean)."""
    shutil.copy(EXAMPLES / "quickstart.ipynb", tmp_path / "quickstart.ipynb")
    done = subprocess.run([sys.executable, "-m", "ctx_magic.demo", str(tmp_path / "quickstart.ipynb")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2_000:] + done.stderr[-2_000:]
    assert "Running" in done.stdout and "Out | " in done.stdout and "Compacted " in done.stdout
    assert "Traceback" not in done.stdout
    assert (tmp_path / "quickstart.out.ipynb").is_file()
    assert "jupyter lab" in done.stdout.splitlines()[-1]
    missing = subprocess.run([sys.executable, "-m", "ctx_magic.demo", str(tmp_path / "nope.ipynb")],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "No notebook at" in missing.stdout


@pytest.mark.parametrize(("name", "unit"), [("quickstart", "x1.3"), ("thinking", "x1.3"), ("long_session", "x1.3"),
                                            ("long_session", "x0.8"), ("long_session", "noisy")])
def test_an_example_runs_when_the_server_counts_otherwise_than_the_client(tmp_path, offline, monkeypatch, name, unit):
    """The stand-in counts 30 % more, 20 % less, or each block off by a different amount: the
    notebook still runs to its end without an error, and every automatic compaction freed room
    (a manual one of a short conversation may not)."""
    monkeypatch.setenv("CTX_MAGIC_OFFLINE_UNIT", unit)  # the kernel's in-process stand-in reads it
    cells = execute(name, tmp_path)
    everything = "\n".join(shown(c) for c in cells)
    assert "ERROR" not in everything and "Stopped" not in everything and "Traceback" not in everything
    status = status_json(cells[-1])
    assert status["breaker_open"] is False
    assert all(b["tokens_after"] < b["tokens_before"] for b in status["boundaries"] if b["trigger"] != "manual")
    if name == "long_session":
        assert "Saved a 59,999-character output to" in everything
        assert any(b["trigger"] != "manual" for b in status["boundaries"])  # the window filled and compacted
    if name == "long_session" and unit != "noisy":
        # Each detail cell adds about 2,600 tokens and the notes start at the warning level, 2,000
        # under the threshold: a turn ends between the two in a deterministic unit. Noise of up to
        # a third on each block can carry one turn from under the warning level past the
        # threshold, so the compaction finds no notes and summarizes, as it should.
        assert "(session-memory)" in everything
