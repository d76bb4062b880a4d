"""Cells as tool results across a restart: a cell run after a turn is on disk as it finishes, enters the next
turn once, and a kernel that died before that turn leaves it for the resumed session."""

from __future__ import annotations

import json

import pytest
from notebook_rig import cell, close_shell, controller, new_shell, offline_shell, run

from ctx_magic.store.pending import PENDING_ID_KEY


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as sh:
        yield sh


def cell_results(shell) -> list[str]:
    session = controller(shell).host.session
    uses = {b["id"] for m in session.live.messages for b in m.blocks("tool_use") if b["name"] == "notebook_cell"}
    return [json.dumps(b["content"]) for m in session.live.messages for b in m.blocks("tool_result")
            if b["tool_use_id"] in uses]


def test_a_cell_after_a_turn_is_on_disk_until_the_next_turn_takes_it(shell):
    run(shell, "%%agent\nhello")
    store = controller(shell).host.session.store
    cell(shell, "print('kept on disk')")
    [waiting] = store.pending_cells().load().cells
    assert "".join(waiting.cell["stdout"]) == "kept on disk\n"
    run(shell, "%%agent\nwhat did I print?")
    assert not store.pending_cells_path.exists()
    assert any("kept on disk" in r for r in cell_results(shell))
    uses = [m for m in controller(shell).host.session.live.messages if m.meta.get(PENDING_ID_KEY)]
    assert [m.meta[PENDING_ID_KEY] for m in uses] == [waiting.id]


def test_cells_a_dead_kernel_left_enter_the_resumed_session_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    first = new_shell()
    run(first, "%%agent\nhello")
    sid = controller(first).host.session.session_id
    cell(first, "print('before the restart')")
    pending = controller(first).host.session.store.pending_cells()
    controller(first).cells.pending.clear()  # the kernel dies: what it held in memory is gone
    close_shell(first)

    again = new_shell()
    try:
        run(again, f"%agent --resume {sid}")
        run(again, "%%agent\nwhat did I print?")
        assert sum("before the restart" in r for r in cell_results(again)) == 1
        assert not pending.path.exists()
        run(again, "%%agent\nand now?")
        assert sum("before the restart" in r for r in cell_results(again)) == 1
    finally:
        close_shell(again)


def test_a_cell_already_in_the_transcript_is_not_taken_again(shell):
    run(shell, "%%agent\nhello")
    session = controller(shell).host.session
    cell(shell, "print('once')")
    [waiting] = session.store.pending_cells().load().cells
    run(shell, "%%agent\nnext")
    session.store.pending_cells().path.write_text(json.dumps(waiting.to_json()) + "\n")  # consume() never ran
    run(shell, "%%agent\nagain")
    assert sum("once" in r for r in cell_results(shell)) == 1


def test_a_cell_that_runs_its_body_as_a_cell_is_recorded_as_the_user_wrote_it(shell):
    run(shell, "%%agent\nhello")
    cell(shell, "%%capture cap\nx = 5\nprint('captured, never shown')")  # %%capture runs its body as a cell
    cell(shell, "y = x + 1")
    run(shell, "%%agent\nwhat changed?")
    session = controller(shell).host.session
    inputs = [b["input"] for m in session.live.messages for b in m.blocks("tool_use") if b["name"] == "notebook_cell"]
    assert inputs == [{"execution_count": 2, "source": "%%capture cap\nx = 5\nprint('captured, never shown')"},
                      {"execution_count": 3, "source": "y = x + 1"}]
    assert not any("captured, never shown" in r for r in cell_results(shell))  # the user saw none of it


def test_a_progress_widget_reaches_the_agent_as_it_ended_not_as_it_was_first_shown(shell):
    # tqdm.auto, and the libraries built on it, draw a widget in a notebook: its text/plain is
    # written when it is displayed (0%), then only the widget's state moves.
    loop = ("import ipywidgets\nbar = ipywidgets.IntProgress(value=0, max=20, description='fitting')\n"
            "display(bar)\nfor i in range(20):\n    bar.value = i + 1\n")
    cell(shell, loop)
    run(shell, f"%%agent\nand the agent's own?\n```python\n{loop}```")
    run(shell, "%%agent\nhow far did they get?")
    tool_results = [b for m in controller(shell).host.session.live.messages for b in m.blocks("tool_result")]
    shown = [json.dumps(b["content"]).split("[displayed text/plain]")[1] for b in tool_results
             if "[displayed text/plain]" in json.dumps(b["content"])]
    assert len(shown) == 2 and all("IntProgress(value=20," in text and "value=0" not in text for text in shown)
