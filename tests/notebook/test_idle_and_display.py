"""Idle microcompact between cells (lazy check and timer thread) and the turn display."""

from __future__ import annotations

import re

import pytest
from builders import ManualClock
from notebook_rig import captured, cell, clocked_shell, controller, run, texts

from ctx_magic.agent.live import LiveContext
from ctx_magic.agent.tools import ToolCall
from ctx_magic.context.invariants import INTERRUPTED_RESULT
from ctx_magic.events import (
    FOLD_TRIGGER,
    Cleared,
    Compacted,
    Notice,
    ReplyRestarted,
    Snipped,
    Status,
    TextDelta,
    ToolFinished,
    ToolOutputDelta,
    ToolStarted,
)
from ctx_magic.messages import result_text
from ctx_magic.notebook.display import (
    SHOWN_HEAD_CHARS,
    SHOWN_TAIL_CHARS,
    STREAM_INTERVAL,
    TurnDisplay,
    shown_text,
)
from ctx_magic.notebook.outputs import CellRecord


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with clocked_shell(tmp_path, monkeypatch) as sh:
        yield sh


def work(shell, turns: int = 7) -> None:
    for n in range(turns):
        run(shell, f"%%agent\nbatch {n}\n```python\nprint('\\n'.join(str(i * {n}) for i in range(80)))\n```")


def cleared_events(shell) -> list[Cleared]:
    seen: list[Cleared] = []
    controller(shell).listeners.append(lambda e: seen.append(e) if isinstance(e, Cleared) else None)
    return seen


def test_idle_gap_is_checked_lazily_at_the_next_cell(shell):
    work(shell)
    seen = cleared_events(shell)
    shell.user_ns["_clock"].now += 5 * 60 + 1
    cell(shell, "a = 1")  # any cell: pre_run_cell notices the idle gap
    assert seen and seen[0].trigger == "idle"
    log = controller(shell).host.session.store.transcript_path.read_text()
    assert '"event":"cleared"' in log


def test_no_clearing_before_the_ttl(shell):
    work(shell)
    seen = cleared_events(shell)
    shell.user_ns["_clock"].now += 4 * 60
    cell(shell, "a = 1")
    assert seen == []


def test_the_users_cells_go_over_the_conversation_once_a_gap_and_not_before_it(shell, monkeypatch):
    work(shell, turns=3)
    passes: list[int] = []
    prepare = LiveContext.prepare
    monkeypatch.setattr(LiveContext, "prepare", lambda live, *a, **k: passes.append(1) or prepare(live, *a, **k))
    for n in range(3):
        cell(shell, f"a = {n}")  # the cache is warm: the next call's own preparation does what is due
    assert passes == []
    shell.user_ns["_clock"].now += 5 * 60 + 1
    for n in range(3):
        cell(shell, f"b = {n}")  # the gap has passed: one pass clears, the cells after it find it done
    assert passes == [1]
    run(shell, "%%agent\nhello")
    after_turn = len(passes)
    shell.user_ns["_clock"].now += 5 * 60 + 1
    cell(shell, "c = 1")  # a new answer, a new gap: one pass again
    cell(shell, "c = 2")
    assert len(passes) == after_turn + 1


def test_a_cell_reloads_the_panel_only_when_the_idle_check_changed_the_context(shell, monkeypatch):
    work(shell, turns=3)
    loads: list[int] = []
    monkeypatch.setattr(controller(shell).panel, "refresh", lambda: loads.append(1))
    cell(shell, "a = 1")  # the cache is warm: nothing to clear, the panel's figures stand
    assert loads == []
    shell.user_ns["_clock"].now += 5 * 60 + 1
    cell(shell, "a = 2")  # old results cleared: the panel loads the session's figures again
    assert loads == [1]


def test_timer_thread_clears_in_memory_and_the_next_cell_writes_it(shell):
    work(shell)
    ctl = controller(shell)
    seen = cleared_events(shell)
    before = ctl.host.session.store.transcript_path.read_text()
    shell.user_ns["_clock"].now += 6 * 60
    ctl.idle._fired()  # what the timer thread runs
    assert seen and seen[0].trigger == "idle"
    assert ctl.host.session.store.transcript_path.read_text() == before  # nothing written from the thread
    assert ctl.idle.deferred
    cell(shell, "b = 2")
    assert '"event":"cleared"' in ctl.host.session.store.transcript_path.read_text()
    assert not ctl.idle.deferred


def test_what_the_timer_cleared_in_a_session_stays_out_of_the_next_one(shell):
    work(shell)
    ctl = controller(shell)
    shell.user_ns["_clock"].now += 6 * 60
    ctl.idle._fired()  # the timer clears the first session in memory while a cell opens a new one
    assert ctl.idle.deferred
    ctl.ensure_session(new=True)
    run(shell, "%%agent\nhello")
    assert not ctl.idle.deferred
    assert '"event":"cleared"' not in ctl.host.session.store.transcript_path.read_text()


def test_timer_is_scheduled_after_a_turn_when_enabled(shell):
    ctl = controller(shell)
    ctl.settings.idle_timer = True
    run(shell, "%%agent\nhello")
    try:
        assert ctl.idle.timer is not None and ctl.idle.timer.daemon
        assert ctl.idle.timer.interval == 5 * 60 + 1
    finally:
        ctl.idle.cancel()


def test_idle_clearing_is_shown_at_the_next_agent_turn(shell):
    work(shell)
    shell.user_ns["_clock"].now += 10 * 60
    _, shown = run(shell, "%%agent\nback again")
    assert re.search(r"Cleared \d+ old tool results? after an idle gap", shown)


def test_old_cells_fold_after_an_idle_gap_and_the_next_turn_says_so(shell):
    for n in range(8):
        cell(shell, f"values_{n} = list(range({n}))\nprint('\\n'.join(str(v) for v in range(60)))")
    run(shell, "%%agent\nwhat did I do?")
    shell.user_ns["_clock"].now += 10 * 60
    _, shown = run(shell, "%%agent\nback again")
    assert "Folded 3 old notebook cells to a line each after an idle gap" in shown
    marker = next(m for m in controller(shell).host.session.live.messages if "notebook cells ran here" in m.text)
    assert re.search(r"^In\[\d+\]: values_0 = list\(range\(0\)\)  \(defines values_0\)$", marker.text, re.MULTILINE)
    [history] = [t for t in controller(shell).executor.tools() if t.spec["name"] == "kernel_history"]
    whole = str(history.run(ToolCall("toolu_test", "kernel_history", {}), None).content)
    assert "values_0 = list(range(0))\nprint(" in whole  # a folded cell's whole source is one call away


# -- the display ------------------------------------------------------------------------------


def test_streaming_text_updates_in_place_at_most_ten_times_a_second(shell):
    clock = ManualClock(0.0)
    with captured() as out:
        display = TurnDisplay(clock=clock)
        for n in range(30):
            display(TextDelta(f"word{n} "))
            clock.now += STREAM_INTERVAL / 3
        display.finish("done")
    text_outputs = [o.data["text/plain"] for o in out.outputs if "text/markdown" in o.data]
    assert 9 <= len(text_outputs) <= 12  # first display, ~10 updates over 1 s, the final flush
    assert text_outputs[-1].strip().endswith("word29")


def test_cells_folded_at_one_break_share_one_notice_that_counts_them_all(shell):
    with captured() as out:
        display = TurnDisplay()
        display(Snipped(4, ("a", "b", "c", "d"), "m1", 300, FOLD_TRIGGER))
        display(Snipped(6, ("e", "f", "g", "h", "i", "j"), "m2", 500, FOLD_TRIGGER))
        display(Snipped(40, ("k",) * 40, "m3", 900))  # a snip of the middle keeps its own notice
        display.finish("done")
    folds = [(o.data["text/plain"][:27], o.update) for o in out.outputs if "old notebook cells" in o.data["text/plain"]]
    assert folds == [("Folded 2 old notebook cells", False), ("Folded 5 old notebook cells", True)]  # one line, updated
    assert [o.data["text/plain"][:19] for o in out.outputs].count("Snipped 40 messages") == 1


def test_a_restarted_reply_withdraws_what_the_broken_stream_showed(shell):
    clock = ManualClock(0.0)
    with captured() as out:
        display = TurnDisplay(clock=clock)
        display(TextDelta("half a sent"))
        display(ReplyRestarted(2, 3, "The connection to the API broke while the reply was streaming."))
        display(TextDelta("A whole answer."))
        display.finish("done")
    text_outputs = [o.data["text/plain"] for o in out.outputs if "text/markdown" in o.data]
    assert text_outputs[-1] == "A whole answer."
    assert "asking again (attempt 2 of 3)" in texts(out)


def test_tools_and_context_changes_are_rendered_as_collapsible_blocks(shell):
    with captured() as out:
        display = TurnDisplay()
        display(Status("thinking"))
        display(ToolStarted("t1", "read_file", {"path": "data.csv"}))
        display(ToolFinished("t1", "read_file", "a,b\n1,2", False))
        display(Compacted("auto", 161_203, 18_422, 143, "b", ("b",), "the summary text"))
        display(Cleared("pressure", {"t1": "[cleared]"}, 4_000))
        display(Notice("error", "The API is overloaded."))
        display.finish("Done")
    html = "\n".join(o.data.get("text/html", "") for o in out.outputs)
    plain = texts(out)
    assert '<details class="ctx-magic-tool"><summary>read_file</summary>' in html
    assert "Compacted 143 messages: 161,203 → 18,422 tokens (auto)" in plain
    assert '<details class="ctx-magic-compaction">' in html and "the summary text" in html
    assert "Cleared 1 old tool result to make room" in plain
    assert "The API is overloaded." in plain
    assert "Thinking…" in plain and "Done" in plain


def status_lines(ticks: list[list[str]], step: float) -> list[str]:
    """The status lines a turn's display shows while code prints `ticks` (pieces per clock step)."""
    clock = ManualClock(0.0)
    with captured() as out:
        display = TurnDisplay(clock=clock)
        display(Status("running", "python"))
        for pieces in ticks:
            for piece in pieces:
                display(ToolOutputDelta(piece))
            clock.now += step
        display.finish("done")
    return [o.data["text/plain"] for o in out.outputs if "ctx-magic-status" in o.data.get("text/html", "")]


def test_what_running_code_prints_shows_beside_the_status_a_few_times_a_second(shell):
    statuses = status_lines([[f"epoch {n}/50 loss={1 / (n + 1):.3f}\n"] for n in range(50)], STREAM_INTERVAL / 5)
    progress = [s for s in statuses if "epoch" in s]
    assert progress[0] == "Running python… epoch 0/50 loss=1.000"
    assert 8 <= len(progress) <= 12  # 50 pieces over a second: about ten updates
    assert statuses[-1] == "done"


def test_an_interrupted_run_keeps_what_it_printed_for_the_agent_and_the_user(shell):
    code = "print('epoch 1 done', flush=True)\nraise KeyboardInterrupt"
    _, shown = run(shell, f"%%agent\ntrain\n```python\n{code}\n```")
    session = controller(shell).host.session
    results = [b for m in session.live.messages for b in m.blocks("tool_result")]
    assert "Interrupted" in shown and "epoch 1 done" in shown and "Traceback" not in shown
    assert results[-1]["is_error"] and result_text(results[-1]).startswith(INTERRUPTED_RESULT)
    assert "epoch 1 done" in result_text(results[-1])
    assert "Running python… epoch 1 done" in shown  # the progress line, while it ran
    assert "Running python" not in result_text(results[-1])  # our own status is not the code's output
    assert run(shell, "%%agent\nare you there?")[0].error_in_exec is None


def test_progress_is_built_from_the_pieces_print_writes(shell):
    statuses = status_lines([["step", " ", str(i), "\n"] for i in range(3)], STREAM_INTERVAL)  # print('step', i)
    progress = [s for s in statuses if "step" in s]
    assert progress[-2:] == ["Running python… step 0", "Running python… step 1"]  # whole lines, not "step"


# -- a long output in the cell (the full text goes to the agent and to its file) ---------------------


def test_a_short_output_is_shown_whole_and_a_long_one_by_its_ends_and_where_the_rest_is():
    assert shown_text("short\n") == "short\n"
    long = "".join(f"row {i}\n" for i in range(1_000_000))  # 10.9 MB
    shown = shown_text(long, "/s/tool-results/t1.txt")
    assert len(shown) < SHOWN_HEAD_CHARS + SHOWN_TAIL_CHARS + 200
    assert shown.startswith("row 0\nrow 1\n") and shown.endswith("row 999999\n")
    assert "MB more not shown; the full output is at /s/tool-results/t1.txt …]" in shown
    assert "the full output is at the session's tool-results folder" in shown_text(long)


def test_the_agents_long_output_is_capped_in_the_cell_with_the_path_of_the_whole(shell):
    long = "".join(f"line {i}\n" for i in range(300_000))  # 3.5 MB
    record = CellRecord("print(...)", stdout=[long])
    with captured() as out:
        display = TurnDisplay(record_for=lambda _id: record, output_path=lambda tool_use_id: f"/s/{tool_use_id}.txt")
        display(ToolStarted("t1", "python", {"code": "print(...)"}))
        display(ToolFinished("t1", "python", long, False))
        display(ToolStarted("t2", "grep", {"pattern": "x"}))
        display(ToolFinished("t2", "grep", long, False))
        display.finish("done")
    shown = sum(len(v) for o in out.outputs for v in o.data.values())
    assert shown < 4 * (SHOWN_HEAD_CHARS + SHOWN_TAIL_CHARS) + 5_000  # two tools, html and plain each
    assert texts(out).count("the full output is at /s/t1.txt") == 1 and "/s/t2.txt" in texts(out)
    html = "\n".join(o.data.get("text/html", "") for o in out.outputs)
    assert html.count("the full output is at /s/t1.txt") == 1 and "line 299999" in html


def test_the_agents_code_and_its_output_are_shown_apart_each_under_its_label(shell):
    code = "for i in range(2):\n    print('row', i)"
    record = CellRecord(code, stdout=["row 0\nrow 1\n"])
    with captured() as out:
        display = TurnDisplay(record_for=lambda _id: record)
        display(ToolStarted("t1", "python", {"code": code}))
        display(ToolFinished("t1", "python", "row 0\nrow 1\n", False))
        display(ToolStarted("t2", "read_file", {"path": "data.csv"}))
        display(ToolFinished("t2", "read_file", "a,b", False))
    python, read = (o.data["text/html"] for o in out.outputs if "ctx-magic-tool" in o.data.get("text/html", ""))
    before, _, output = python.partition('<div class="ctx-magic-tool-output"')
    assert "for i in range(2):" in before and "row 0" not in before
    assert "row 0\nrow 1" in output and "range(2)" not in output
    labels = re.findall(r'class="ctx-magic-tool-part"[^>]*>([^<]*)<', python)
    assert labels == ["Code", "Output"] and output.index(">Output<") < output.index("row 0")
    assert "border-top" in output.split(">", 1)[0]  # a rule between them, in any frontend
    assert re.findall(r'class="ctx-magic-tool-part"[^>]*>([^<]*)<', read) == ["Input", "Result"]
