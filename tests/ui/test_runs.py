"""The panel's background runs: a row per run with its state and last line, a Stop button while
it runs (clicking it stops the run), rows updated in place from the run watch."""

from __future__ import annotations

import threading

import pytest
from notebook_rig import controller, run
from tasks_rig import board_shell, only_run, wait_for

from ctx_magic.ui.runs import RunRows

ROW = {"id": "t1", "state": "running", "words": "running for 1 min 2 s", "last_line": "step 61 <ok>",
       "can_stop": True}


def test_a_row_shows_the_state_and_the_last_line_and_a_stop_button_while_it_runs():
    stopped: list[str] = []
    rows = RunRows(stopped.append)
    rows.show([ROW])
    assert rows.box.layout.display is None
    (_title, row) = rows.box.children
    text, button = row.children
    assert "running for 1 min 2 s" in text.value and "step 61 &lt;ok&gt;" in text.value
    assert button.layout.display is None
    button.click()
    assert stopped == ["t1"]
    rows.show([{**ROW, "state": "stopped", "words": "stopped after 1 min 3 s", "can_stop": False}])
    assert rows.box.children[1] is row  # the same row, updated in place
    assert button.layout.display == "none" and "stopped after 1 min 3 s" in text.value


def test_no_runs_no_section():
    rows = RunRows()
    rows.show([])
    assert rows.box.layout.display == "none"


@pytest.fixture
def rig(tmp_path, monkeypatch):
    with board_shell(tmp_path, monkeypatch) as found:
        yield found


def test_the_panels_stop_button_stops_a_background_run(rig):
    shell, board, _clock = rig
    shell.user_ns["go"] = threading.Event()
    run(shell, "%%agent\nwork\n```python background\nprint('waiting', flush=True)\nwhile not go.wait(0.01):\n"
               "    pass\n```")
    started = only_run(board)
    wait_for(started, lambda: "waiting" in started.tail)
    board.check()  # what the watch thread does every second
    panel = controller(shell).panel.widget
    (_title, row) = panel.runs.box.children
    text, button = row.children
    assert "t1" in text.value and "waiting" in text.value and button.layout.display is None
    button.click()
    assert started.done.wait(20) and started.state == "stopped"
    assert "stopped after" in text.value and button.layout.display == "none"
