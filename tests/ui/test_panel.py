"""SPEC U1, U3 without a browser: after a scripted session the panel's traits hold the engine's
numbers, the boundaries with their summaries, the persisted outputs and the cell marks."""

from __future__ import annotations

import pytest
from builders import ManualClock
from notebook_rig import cell, clocked_shell, controller, run

from ctx_magic.events import (
    CacheBroke,
    Cleared,
    Compacted,
    ContextFigures,
    ContextMeasured,
    Persisted,
    TextDelta,
    UsageUpdated,
)
from ctx_magic.messages import Usage, notebook_cell_id
from ctx_magic.ui.panel import FLUSH_INTERVAL, ContextPanel


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with clocked_shell(tmp_path, monkeypatch) as sh:
        yield sh


def scripted_session(shell) -> None:
    shell.run_line_magic("config", "CtxMagic.context_window = 30000")
    shell.run_line_magic("config", "CtxMagic.keep_recent = 2")
    cell(shell, "table = [(i, i * i) for i in range(400)]\nprint(table)")  # a user cell: cleared later
    run(shell, "%%agent\nfirst look\n```python\nprint(len(table))\n```")
    run(shell, "%%agent\ndump it all\n```python\nprint('\\n'.join(f'{i:05d} ' + 'x' * 60 for i in range(1000)))\n```")
    for n in range(3):
        run(shell, f"%%agent\nstep {n}\n```python\nprint('\\n'.join(str(i * {n}) for i in range(300)))\n```")
    shell.user_ns["_clock"].now += 600  # an idle gap: old results are cleared at the next cell
    run(shell, "%%agent\nback again")
    run(shell, "%compact keep the table facts")


def test_panel_traits_hold_the_engine_figures_after_a_session(shell):
    scripted_session(shell)
    ctl = controller(shell)
    panel, session = ctl.panel.widget, ctl.session
    status = session.status().to_json()
    assert panel.session_id == session.session_id
    assert (panel.window, panel.threshold, panel.warning, panel.blocking) == (
        status["window"], status["threshold"], status["warning"], status["blocking"])
    assert panel.tokens == status["tokens"] and panel.zone == status["zone"]
    assert panel.messages == status["messages"]
    assert (panel.live_results, panel.cleared_results, panel.persisted_results) == tuple(
        status["tool_results"][k] for k in ("live", "cleared", "persisted"))
    assert panel.spend["calls"] == status["usage"]["calls"]
    assert panel.cache_hit_ratio == pytest.approx(status["usage"]["cache_hit_ratio"], abs=1e-3)


def test_panel_timeline_has_every_change_with_full_summaries(shell):
    scripted_session(shell)
    ctl = controller(shell)
    kinds = [entry["kind"] for entry in ctl.panel.widget.timeline]
    assert "microcompact" in kinds and kinds[-1] == "manual"
    compactions = [e for e in ctl.panel.widget.timeline if e["kind"] not in ("microcompact", "snip")]
    assert [e["summary"] for e in compactions] == [b.summary for b in ctl.session.compaction.boundaries]
    assert "Primary Request and Intent" in compactions[-1]["summary"]
    accordion = [c for c in ctl.panel.widget.timeline_box.children if "ctx-magic-boundary" in c._dom_classes][-1]
    assert "manual compaction" in accordion.get_title(0)
    summary_html, button, originals = accordion.children[0].children
    assert "Primary Request and Intent" in summary_html.value
    button.click()  # open the original messages the summary replaced, from the transcript
    assert "first look" in originals.value and "dump it all" in originals.value


def test_panel_lists_persisted_outputs_and_marks_cells_the_agent_cannot_see(shell):
    scripted_session(shell)
    panel = controller(shell).panel.widget
    assert panel.persisted and panel.persisted[0]["chars"] > 50_000
    assert "<persisted-output>" in panel.persisted[0]["preview"]
    assert "Persisted outputs" in panel.persisted_html.value
    assert "1" in panel.cell_marks  # the user's first cell (execution count 1) was cleared
    assert "no longer sees this cell's output" in panel.cell_marks["1"]


def test_a_resumed_session_gets_a_panel_filled_from_its_transcript(shell):
    scripted_session(shell)
    ctl = controller(shell)
    panel = ctl.panel.widget
    kinds = [e["kind"] for e in panel.timeline]
    sid = ctl.session.session_id
    run(shell, "%agent --new")
    assert ctl.panel.widget is panel and panel.timeline == [] and panel.session_id == ctl.session.session_id
    assert panel.persisted == [] and panel.cell_marks == {}  # nothing of the old session stays on show
    run(shell, f"%agent --resume {sid}")
    assert ctl.panel.widget is panel and panel.session_id == sid
    assert [e["kind"] for e in panel.timeline] == kinds
    assert panel.tokens == ctl.session.status().tokens


def test_panel_updates_are_throttled_while_streaming():
    clock = ManualClock()
    panel = ContextPanel(clock=clock)
    sent = []
    panel.observe(lambda change: sent.append(change["new"]), names="tokens")
    for n in range(40):
        panel.handle(ContextMeasured(ContextFigures(n, 100, 80, 90, 120, "ok", 50.0, 3, 1, 0, 0)))
        panel.handle(TextDelta("x"))  # streaming text never touches the panel
        clock.now += FLUSH_INTERVAL / 8
    assert len(sent) <= 40 * (FLUSH_INTERVAL / 8) / FLUSH_INTERVAL + 2
    panel.flush()
    assert panel.tokens == 39


def test_panel_is_driven_only_by_events():
    panel = ContextPanel(clock=ManualClock())
    panel.handle(UsageUpdated(Usage(10, 5, 20, 70), 100, 1.1,
                              {"calls": 1, "input_tokens": 10, "output_tokens": 5,
                               "cache_creation_input_tokens": 20, "cache_read_input_tokens": 70}, 0.7))
    panel.handle(Persisted("toolu_1", "/s/tool-results/toolu_1.txt", 90_000, 20_000, "<persisted-output>…"))
    panel.handle(Cleared("pressure", {notebook_cell_id(4, "9"): "[cleared]"}, 2_000))
    panel.handle(Compacted("auto", 5_000, 1_000, 12, "b1", ("b1",), "the summary", summarized_uuids=("u1",)))
    panel.flush()
    assert panel.cache_hit_ratio == 0.7 and panel.spend["calls"] == 1
    assert panel.persisted[0]["path"] == "/s/tool-results/toolu_1.txt"
    assert "to make room" in panel.cell_marks["4"]
    assert [e["kind"] for e in panel.timeline] == ["microcompact", "auto"]
    assert panel.timeline[-1]["replaced"] == ["u1"] and panel.tokens == 1_000


def test_panel_shows_prompt_cache_breaks_and_flags_unexplained_ones():
    panel = ContextPanel(clock=ManualClock())
    panel.handle(CacheBroke(40_000, 0, 41_000, expected=True, reason="the cache expired after 12 min idle"))
    panel.flush()
    assert panel.cache_breaks[0]["reason"].startswith("the cache expired")
    assert "prompt cache broke 1x (0 unexplained)" in panel.counts.value and "#c62828" not in panel.counts.value
    panel.handle(CacheBroke(41_000, 3_000, 38_000, expected=False, reason="unexplained"))
    panel.flush()
    assert len(panel.cache_breaks) == 2
    assert "2x (1 unexplained)" in panel.counts.value and "41,000 -> 3,000" in panel.counts.value
    assert "#c62828" in panel.counts.value

