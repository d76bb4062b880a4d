"""Every notebook in examples/ runs under a real ipykernel through nbclient, offline, and its
outputs say what the notebook promises."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from ctx_magic.agent.catalog import model_spec
from ctx_magic.memory.store import account_name

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def execute(name: str, workdir: Path) -> list:
    notebook = nbformat.read(str(EXAMPLES / f"{name}.ipynb"), as_version=4)
    handler = signal.getsignal(signal.SIGINT)
    try:
        NotebookClient(notebook, timeout=180, kernel_name="python3",
                       resources={"metadata": {"path": str(workdir)}}).execute()
    finally:  # a kernel that fails to start leaves nbclient's no-op SIGINT handler in this process
        signal.signal(signal.SIGINT, handler)
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
        "background_run", "long_session", "quickstart", "team_memory", "thinking"]


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
    # claude-opus-5-5 thinks adaptively and refuses a budget (the catalog): the type in force is adaptive
    assert status["thinking"]["type"] == "adaptive" and status["model"] == "claude-opus-5-5"
    assert model_spec("claude-opus-5-5").thinking == ("adaptive",)
    assert status["cost"]["session_usd"] > 0 and status["window_source"] == "models-api"


def test_background_run_trains_beside_the_users_cells_is_read_by_offset_and_a_stall_is_answered(tmp_path, offline):
    cells = execute("background_run", tmp_path)
    everything = "\n".join(shown(c) for c in cells)
    assert "ERROR" not in everything
    assert "Started background run t1" in shown(cells[1])
    assert shown(cells[2]).strip() == "best region: east"  # the user's cell, while the run printed
    assert "Output from offset 0 to" in shown(cells[4]) and "epoch  4/12  loss 0.3679" in shown(cells[4])
    assert "The code is waiting for input after 'Delete 3 old checkpoints? [y/N]'" in shown(cells[5])
    silence = re.search(r"stalled: waiting for input after 'Delete 3 old checkpoints\? \[y/N\]' "
                        r"\(no output for (\d+) s\)", shown(cells[5]))
    assert int(silence.group(1)) >= 2  # the wall clock's seconds: at least the notebook's 2-second threshold
    assert "Sent to the stdin of the subprocess of run t2." in shown(cells[6])
    assert shown(cells[7]).strip() == "final loss 0.0498"
    last_read = shown(cells[8])
    assert "epoch 12/12  loss 0.0498\ntraining done" in last_read and "epoch  1/12" not in last_read  # by offset
    assert "Delete 3 old checkpoints? [y/N] y\ndeleted 3" in last_read


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


def test_team_memory_reaches_the_second_member_as_a_note_from_a_colleague(tmp_path, offline):
    cells = execute("team_memory", tmp_path)
    everything = "\n".join(shown(c) for c in cells)
    assert "ERROR" not in everything
    alice = f'"alice" (claimed; the file belongs to OS user {account_name(os.getuid())})'  # a name in a setting
    assert f"for the team (added by {alice} on " in everything
    proposed = "- Churn is counted over a 90-day window. (proposed for the team: %memory accept churn-is-counted-"
    assert proposed in everything
    assert "Accepted 1 memory into the folder of team 'analytics':\n- churn-is-counted-" in everything
    assert "Refused to store this memory: W********** looks like credentials in a URL." in everything
    assert "Winter2024" not in everything  # the outputs name it masked only
    section = shown(next(c for c in cells if "frame.memory_section" in c.source))
    assert f"- [project] from {alice} on " in section and "region_code" in section
    assert "## Notes from your team" in section
    assert "dark mode" not in section  # alice's own preference stays hers
    assert "Team memory: team 'analytics' in team-share/analytics, you add as 'bob'." in everything
    assert "Team memory: Dream done:" in everything
    # Bob's background run: his own cell runs while it fits, and the agent reads the log it left.
    started = next(c for c in cells if "```python background" in c.source)
    assert "Started background run t1" in shown(started)
    assert shown(next(c for c in cells if c.source.startswith("import time"))).strip() == "fitted: N, S, E, W"
    read = shown(next(c for c in cells if c.source.endswith("task read t1")))
    assert "fitted the model for region_code=W\nall regions fitted" in read
    team = tmp_path / "team-share" / "analytics"
    assert len([p for p in team.glob("*.md") if p.name != "MEMORY.md"]) == 2
    assert not any("Winter2024" in p.read_text() for p in tmp_path.rglob("*.md"))


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
        # Each detail cell adds about 2,500 tokens and the notes start at the warning level, 2,000
        # under the threshold: a turn ends between the two in a deterministic unit. Noise of up to
        # a third on each block can carry one turn from under the warning level past the
        # threshold, so the compaction finds no notes and summarizes, as it should.
        assert "(session-memory)" in everything
