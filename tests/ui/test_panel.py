"""The context panel and its updates without a browser: after a scripted session the panel's traits hold the engine's
numbers, the composition of the next request, every model call, the changes with their cards,
the persisted outputs and the cell marks; a new or resumed session refills the same panel."""

from __future__ import annotations

import pytest
from builders import ManualClock
from notebook_rig import cell, clocked_shell, controller, run

from ctx_magic.events import (
    FOLD_TRIGGER,
    AuditReport,
    CacheBroke,
    Cleared,
    Compacted,
    ContextMeasured,
    Persisted,
    Snipped,
    Status,
    TextDelta,
    UsageUpdated,
)
from ctx_magic.figures import Composition, ContextFigures
from ctx_magic.messages import Usage, notebook_cell_id
from ctx_magic.ui.panel import FLUSH_INTERVAL, ContextPanel


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with clocked_shell(tmp_path, monkeypatch) as sh:
        yield sh


def part(widget, css_class: str):  # type: ignore[no-untyped-def]
    """The one widget under `widget` (itself included) that carries `css_class`."""
    found = [w for w in widget_tree(widget) if css_class in getattr(w, "_dom_classes", ())]
    assert len(found) == 1, (css_class, found)
    return found[0]


def widget_tree(widget):  # type: ignore[no-untyped-def]
    yield widget
    for child in getattr(widget, "children", ()):
        yield from widget_tree(child)


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
    panel, session = ctl.panel.widget, ctl.host.session
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


def test_composition_comes_from_the_status_and_adds_up_to_the_window(shell):
    scripted_session(shell)
    ctl = controller(shell)
    panel = ctl.panel.widget
    assert panel.composition == ctl.host.session.status().to_json()["composition"]
    used = sum(panel.composition[p] for p in ("system", "tools", "memory", "messages", "tool_results", "persisted"))
    assert used == panel.tokens
    assert used + panel.composition["free"] + panel.composition["buffer"] + panel.composition["reserve"] == 30_000
    assert 'data-part="system"' in panel.bar.value and "Reply reserve" in panel.bar.value


def test_chart_has_one_bar_per_model_call_and_one_marker_per_change(shell):
    scripted_session(shell)
    ctl = controller(shell)
    panel = ctl.panel.widget
    assert len(panel.calls) == ctl.host.session.status().usage.calls - 1  # the summary call is a side call
    assert panel.chart.value.count('class="ctx-magic-call"') == len(panel.calls)
    assert panel.chart.value.count('data-kind="compaction"') >= 1
    markers = panel.chart.value.count('class="ctx-magic-marker"')
    assert markers == len(panel.timeline)
    assert panel.chart.value.count('class="ctx-magic-marker" type="button" data-kind="compaction"') == len(
        ctl.host.session.compaction.boundaries)


def test_every_change_has_a_card_with_its_key_and_compactions_show_the_decisions_reason(shell):
    scripted_session(shell)
    ctl = controller(shell)
    panel = ctl.panel.widget
    kinds = [entry["kind"] for entry in panel.timeline]
    assert "clearing" in kinds and kinds[-1] == "compaction"
    compactions = [e for e in panel.timeline if e["kind"] == "compaction"]
    assert [e["summary"] for e in compactions] == [b.summary for b in ctl.host.session.compaction.boundaries]
    assert compactions[-1]["reason"] == "the user asked for it: keep the table facts"
    card = panel.cards.box.children[0]  # newest first
    assert f"ctx-magic-card-{compactions[-1]['key']}" in card._dom_classes
    assert "Compaction (manual)" in card.get_title(0)
    facts, summary, button, originals = (part(card, name) for name in (
        "ctx-magic-part-facts", "ctx-magic-part-summary", "ctx-magic-originals-button", "ctx-magic-part-originals"))
    assert "the user asked for it: keep the table facts" in facts.value
    assert summary.outputs[0]["data"]["text/markdown"].startswith(compactions[-1]["summary"][:40])
    button.click()  # open the original messages the summary replaced, from the transcript
    assert "first look" in originals.value and "dump it all" in originals.value
    clearing = next(e for e in panel.timeline if e["kind"] == "clearing")
    assert f'data-ctx-card="{clearing["key"]}"' in "".join(
        c.value for c in panel.cards.box.children if hasattr(c, "value"))


def test_cleared_persisted_and_summarized_cells_are_marked_with_their_card(shell):
    scripted_session(shell)
    panel = controller(shell).panel.widget
    assert panel.persisted and panel.persisted[0]["chars"] > 50_000
    assert "<persisted-output>" in panel.persisted[0]["preview"]
    assert "Saved to disk this session (1)" in panel.persisted_html.value
    mark = panel.cell_marks["count:1"]  # the user's first cell (no cell id outside a frontend)
    assert mark["count"] == 1 and mark["kind"] == "summarized"  # cleared first, then summarized
    assert mark["card"] == panel.timeline[-1]["key"] and "compaction" in mark["why"]
    assert "summary" in mark["still"]


def test_a_new_and_a_resumed_session_refill_the_same_panel(shell):
    scripted_session(shell)
    ctl = controller(shell)
    panel = ctl.panel.widget
    timeline, calls = [(e["kind"], e["at"]) for e in panel.timeline], list(panel.calls)
    sid = ctl.host.session.session_id
    run(shell, "%agent --new")
    assert ctl.panel.widget is panel and panel.timeline == [] and panel.session_id == ctl.host.session.session_id
    assert panel.persisted == [] and panel.cell_marks == {} and panel.calls == []
    run(shell, f"%agent --resume {sid}")
    assert ctl.panel.widget is panel and panel.session_id == sid
    assert [(e["kind"], e["at"]) for e in panel.timeline] == timeline
    assert panel.calls == calls  # every model call, rebuilt from the responses' usage in the transcript
    assert panel.tokens == ctl.host.session.status().context.tokens
    assert panel.cell_marks["count:1"]["kind"] == "summarized"


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
                               "cache_creation_input_tokens": 20, "cache_read_input_tokens": 70}, 0.7, 0.0012))
    panel.handle(Persisted("toolu_1", "/s/tool-results/toolu_1.txt", 90_000, 20_000, "<persisted-output>…"))
    panel.handle(Cleared("pressure", {notebook_cell_id(4, "9"): "[cleared]"}, 2_000))
    panel.handle(Compacted("auto", 5_000, 1_000, 12, "b1", ("b1",), "the summary", summarized_uuids=("u1",),
                           reason="19,000 tokens reach the compaction threshold 18,000"))
    panel.handle(ContextMeasured(ContextFigures(1_000, 18_000, 15_000, 19_000, 30_000, "ok", 94.4, 3, 1, 0, 0,
                                                composition=Composition(messages=1_000, free=17_000, window=30_000))))
    panel.flush()
    assert panel.cache_hit_ratio == 0.7 and panel.spend["calls"] == 1
    assert panel.calls == [{"prompt": 100, "read": 70, "write": 20, "output": 5, "usd": 0.0012}]
    assert "5 generated, $0.0012" in panel.chart.value  # the call's price on hover
    assert panel.persisted[0]["path"] == "/s/tool-results/toolu_1.txt"
    assert panel.cell_marks["count:4"]["kind"] == "cleared" and "to make room" in panel.cell_marks["count:4"]["why"]
    assert [(e["kind"], e["at"]) for e in panel.timeline] == [("clearing", 1), ("compaction", 1)]
    assert panel.timeline[-1]["replaced"] == ["u1"] and panel.tokens == 1_000
    assert panel.composition["messages"] == 1_000  # the live figures carry the composition too
    assert "compaction threshold 18,000" in part(panel.cards.box, "ctx-magic-part-facts").value


def test_a_compaction_audit_shows_in_its_card_when_present():
    panel = ContextPanel(clock=ManualClock())
    audit = AuditReport(user_messages=("u1",), user_messages_checked=3, tokens=12,
                        text="- the user's deadline (Friday)")
    panel.handle(Compacted("auto", 5_000, 1_000, 12, "b1", ("b1",), "## 1. Primary Request",
                           summarized_uuids=("u1",), audit=audit))
    audit_part = part(panel.cards.box, "ctx-magic-part-audit")
    assert audit_part.outputs[0]["data"]["text/markdown"] == "- the user's deadline (Friday)"
    plain = ContextPanel(clock=ManualClock())
    plain.handle(Compacted("auto", 5_000, 1_000, 12, "b2", ("b2",), "s", summarized_uuids=("u1",)))
    assert not [w for w in widget_tree(plain.cards.box) if "ctx-magic-part-audit" in getattr(w, "_dom_classes", ())]


def test_panel_shows_prompt_cache_breaks_and_flags_unexplained_ones():
    panel = ContextPanel(clock=ManualClock())
    panel.handle(CacheBroke(40_000, 0, 41_000, expected=True, reason="the cache expired after 12 min idle"))
    panel.flush()
    assert panel.cache_breaks[0]["reason"].startswith("the cache expired")
    assert "1× (0 unexplained)" in panel.counts.value and "ctx-magic-alarm" not in panel.counts.value
    panel.handle(CacheBroke(41_000, 3_000, 38_000, expected=False, reason="unexplained"))
    panel.flush()
    assert len(panel.cache_breaks) == 2
    assert "2× (1 unexplained)" in panel.counts.value and "41,000 → 3,000" in panel.counts.value
    assert "ctx-magic-alarm" in panel.counts.value


def test_panel_carries_its_own_theme_aware_stylesheet():
    panel = ContextPanel(clock=ManualClock())
    style = next(w for w in panel.children if getattr(w, "value", "").startswith("<style")).value
    assert style.startswith("<style") and ".ctx-magic-panel" in style
    assert "#eee" not in style.lower() and "var(--jp-layout-color" in style


def test_a_state_change_shows_at_once_even_inside_the_throttle_interval():
    clock = ManualClock()
    panel = ContextPanel(clock=clock)
    panel.handle(ContextMeasured(ContextFigures(5, 100, 80, 90, 120, "ok", 95.0, 1, 0, 0, 0)))
    panel.handle(Status("running", "python"))  # then nothing while the code runs or ask waits
    assert panel.status == "running" and "running code" in panel.header.value


def test_cells_folded_at_one_break_are_one_change_with_one_card():
    panel = ContextPanel(clock=ManualClock())
    panel.handle(Cleared("idle", {notebook_cell_id(4, "9"): "[cleared]"}, 2_000))  # the same break's clearing
    panel.handle(Snipped(4, ("a", "b", "c", "d"), "m1", 300, FOLD_TRIGGER))
    panel.handle(Snipped(6, ("e", "f", "g", "h", "i", "j"), "m2", 500, FOLD_TRIGGER))
    panel.flush()
    assert [(e["kind"], e.get("messages"), e["tokens_freed"]) for e in panel.timeline] == [
        ("clearing", None, 2_000), ("snip", 10, 800)]
    assert panel.chart.value.count('class="ctx-magic-marker"') == 2
    assert 'title="folded 5 old cells (click for details)"' in panel.chart.value
    assert "a line per cell" in "".join(getattr(w, "value", "") for w in widget_tree(panel.cards.box))
