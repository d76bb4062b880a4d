"""The turn that announces the next turn's compaction prices it once, in an IPython shell against
the offline stand-in: the Done line names the price the panel shows after the session's notes,
written at that turn's end, are in (a compaction from them makes no summary call)."""

from __future__ import annotations

import re

from notebook_rig import clocked_shell, controller, run

from ctx_magic.prices import format_usd

MAX_TURNS = 12  # a bound, not a wait: a 20,000-token window reaches the notice within a few turns


def wordy(n: int) -> str:
    return f"%%agent\nTurn {n}: " + " ".join(f"word{n}x{i}" for i in range(150))


def test_the_done_line_and_the_panel_price_the_compaction_ahead_alike(tmp_path, monkeypatch):
    with clocked_shell(tmp_path, monkeypatch) as shell:
        run(shell, "%config CtxMagic.context_window = 20000")
        run(shell, "%config CtxMagic.autocompact_pct = 50.0")
        shown = ""
        for n in range(MAX_TURNS):
            _, shown = run(shell, wordy(n))
            if "the next turn compacts" in shown:
                break
        ctl = controller(shell)
        notes = ctl.host.session.plugins.notes
        notes.wait(60)  # a bound: whatever the notes thread still does is over
        ctl.panel.refresh()
        ahead = ctl.panel.widget.next_call["ahead"]
    line = next(x for x in shown.splitlines() if x.startswith("Done"))
    said = re.search(r"the next turn compacts: ([\d,]+) tokens now, .* \(about (\$[\d.,]+)\)", line)
    assert said is not None, line
    assert ahead is not None and ahead["summary_tokens"] == 0  # from the notes: no summary call
    assert said.group(1) == f"{ahead['tokens']:,}" and said.group(2) == format_usd(ahead["cost_usd"])
