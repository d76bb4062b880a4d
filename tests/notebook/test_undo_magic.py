"""`%compact --undo` in an IPython shell against the offline stand-in: one clear line for each bad
input (no session, nothing to undo, other options beside it, the agent's own code mid-turn), and an
undo of `%compact --snip` that brings the snipped messages back and records it."""

from __future__ import annotations

import pytest
from notebook_rig import controller, offline_shell, run

from ctx_magic.events import Undone


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with offline_shell(tmp_path, monkeypatch) as sh:
        yield sh


def turn(n: int) -> str:
    return f"%%agent\nPart {n}\n```python\nprint('row {n}')\n```"


def test_bad_input_ends_in_one_line_and_the_session_still_works(shell):
    _, shown = run(shell, "%compact --undo")
    assert "There is no agent session yet: run a %%agent cell first." in shown
    run(shell, turn(0))
    _, shown = run(shell, "%compact --undo")
    assert "There is no compaction, snip or clearing to undo in this session." in shown
    for line in ("%compact --undo --snip 3", "%compact --undo keep the plots", "%compact --undo --not-now"):
        _, shown = run(shell, line)
        assert "--undo takes no other option or instructions." in shown and "Traceback" not in shown
    _, shown = run(shell, "%%agent\nnest\n```python\nget_ipython().run_line_magic('compact', '--undo')\n```")
    assert "%compact cannot be used from inside it" in shown and "Traceback" not in shown
    _, shown = run(shell, turn(1))
    assert "Done" in shown


def test_undo_of_a_snip_brings_the_messages_back_and_the_transcript_records_it(shell):
    for n in range(4):
        run(shell, turn(n))
    session = controller(shell).host.session
    live = session.live.messages
    _, snipped = run(shell, "%compact --snip 2")
    assert len(session.live.messages) < len(live)
    _, shown = run(shell, "%compact --undo")
    records = session.store.load_transcript().records
    assert "Snipped" in snipped and "Undid your snip: the " in shown and " messages it removed are back (" in shown
    assert [m.uuid for m in session.live.messages[:len(live)]] == [m.uuid for m in live]
    assert [r["kind"] for r in records if r.get("event") == Undone.name] == ["snip"]


def test_the_panel_s_undo_takes_back_a_compaction_after_a_resume(shell):
    for n in range(3):
        run(shell, turn(n))
    run(shell, "%compact")
    ctl = controller(shell)
    session = ctl.host.session
    boundary = session.compaction.boundaries[-1].boundary_uuid
    _, resumed = run(shell, f"%agent --resume {session.session_id}")
    again = ctl.host.session
    said = ctl.panel.undo_clicked(boundary)  # the compaction card's Undo, on the panel refilled from the transcript
    _, status = run(shell, "%ctx status")
    run(shell, "import ctx_magic\n_value = ctx_magic.context()")
    value = shell.user_ns["_value"]
    card = next(e for e in ctl.panel.widget.timeline if e["key"] == f"compaction-{boundary}")
    _, shown = run(shell, turn(3))
    assert again is not session and f"Resumed session {session.session_id}" in resumed
    assert said.startswith("Undid the manual compaction: the ") and card.get("undone") is True
    assert "0 compactions (1 more undone, not counted)" in status
    assert (value.compactions, value.undone_compactions, value.last_compaction) == (0, 1, None)
    assert "Done" in shown
