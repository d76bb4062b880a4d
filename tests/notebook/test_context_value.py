"""The context in the user's hands, in an IPython shell on a manual clock: `ctx_magic.context()`
and the value `%ctx status` returns, the price of the next call before it is sent (`%ctx status`,
the panel), the notice in the Done line before an automatic compaction and `%compact --not-now`."""

from __future__ import annotations

import re

import pytest
from IPython.core.interactiveshell import InteractiveShell
from notebook_rig import clocked_shell, controller, run

import ctx_magic
from ctx_magic.agent.status import ContextReport
from ctx_magic.errors import NoSession


@pytest.fixture
def shell(tmp_path, monkeypatch):
    with clocked_shell(tmp_path, monkeypatch) as sh:
        yield sh


def wordy(n: int) -> str:
    return f"%%agent\nTurn {n}: " + " ".join(f"word{n}x{i}" for i in range(150))


def test_without_a_session_the_value_is_one_clear_error_never_a_traceback(shell):
    with pytest.raises(NoSession, match=r"^There is no agent session yet: run a %%agent cell first\.$"):
        ctx_magic.context()
    _, shown = run(shell, "import ctx_magic\nctx_magic.context()")
    assert "NoSession: There is no agent session yet: run a %%agent cell first." in shown
    assert "Traceback" not in shown and "File " not in shown


def test_outside_ipython_the_error_says_how_to_load_the_extension(monkeypatch):
    InteractiveShell.clear_instance()
    with pytest.raises(NoSession, match="ctx_magic is not loaded here: run %load_ext ctx_magic"):
        ctx_magic.context()


def test_ctx_status_returns_the_same_value_as_ctx_magic_context_with_an_html_table(shell):
    run(shell, "%%agent\nhello")
    result, shown = run(shell, "%ctx status")
    report = result.result
    assert isinstance(report, ContextReport) and report == ctx_magic.context()
    assert report.session_id == controller(shell).host.session.session_id
    data, _ = shell.display_formatter.format(report)  # what a notebook shows as the cell's Out
    html = data["text/html"]
    assert data["text/plain"] == repr(report)
    assert "<table class='ctx-magic-context'>" in html and f"{report.tokens:,} of {report.window:,}" in html


def test_past_the_ttl_status_and_panel_show_the_next_call_s_price_and_the_bill_matches(shell):
    for n in range(3):
        run(shell, wordy(n))
    ctl = controller(shell)
    _, shown = run(shell, "%ctx status")
    assert re.search(r"next call: cache warm \(the last call cached it 0 min ago\), 5\.0 min left", shown)
    shell.user_ns["_clock"].now += 6 * 60
    ctl.idle._fired()  # what the idle timer's thread runs: the panel is told the cache went cold
    panel_cache = ctl.panel.widget.next_call["cache"]
    assert panel_cache["state"] == "cold" and panel_cache["write_usd"] > 0
    result, shown = run(shell, "%ctx status")
    predicted = result.result.cache
    line = (f"next call: cache cold (idle 6 min, past the cache's 5m lifetime): it writes {predicted.write_tokens:,} "
            f"tokens to the cache, about ${predicted.write_usd:.4f} (5m lifetime)")
    assert line in shown
    run(shell, "%%agent\nGo on.")
    session = ctl.host.session
    at = max(i for i, m in enumerate(session.live.messages) if m.role == "user" and m.text == "Go on.")
    usage = next(m for m in session.live.messages[at:] if m.role == "assistant" and m.api_id).usage
    billed = usage.cache_creation_input_tokens * session.frame.prices().cache_write_5m / 1_000_000
    assert usage.cache_read_input_tokens == 0 and predicted.write_usd == pytest.approx(billed, rel=0.01)


def test_a_model_set_for_the_next_turn_shows_the_rewrite_at_that_model_s_price(shell):
    run(shell, wordy(0))
    run(shell, "%config CtxMagic.model = 'claude-opus-4-1'")
    result, shown = run(shell, "%ctx status")
    cache = result.result.cache
    assert cache.cold and cache.reason == "the model changes to claude-opus-4-1 at the next turn"
    assert cache.write_usd == pytest.approx(cache.write_tokens * 18.75 / 1_000_000)  # Opus 4.1's 5-minute write
    assert ctx_magic.context().cache == cache


def test_the_done_line_announces_the_compaction_and_not_now_lets_one_turn_through(shell):
    run(shell, "%config CtxMagic.context_window = 20000")
    run(shell, "%config CtxMagic.autocompact_pct = 50.0")
    run(shell, wordy(0))
    _, shown = run(shell, "%compact --not-now")
    assert "No automatic compaction is due at the next turn: nothing to put off." in shown
    for n in range(1, 12):
        _, shown = run(shell, wordy(n))
        if "the next turn compacts" in shown:
            break
    done = next(line for line in shown.splitlines() if line.startswith("Done"))
    assert re.search(r"· the next turn compacts: [\d,]+ tokens now, about [\d,]+ more a turn, threshold 7,500 "
                     r"\(about \$0\.\d{4}\): %compact --not-now lets one more turn through under the blocking limit "
                     r"14,700$", done)
    _, said = run(shell, "%compact --not-now")
    assert re.search(r"The next turn goes on without compacting \([\d,]+ tokens; the blocking limit is 14,700\)", said)
    ctl = controller(shell)
    boundaries = len(ctl.host.session.compaction.boundaries)
    _, shown = run(shell, wordy(20))
    assert len(ctl.host.session.compaction.boundaries) == boundaries  # let through
    assert "the user let this turn through" in ctl.host.session.status().context.plan
    run(shell, wordy(21))
    assert len(ctl.host.session.compaction.boundaries) == boundaries + 1


def test_not_now_takes_no_other_option(shell):
    run(shell, "%%agent\nhello")
    _, shown = run(shell, "%compact --not-now --snip")
    assert "UsageError: --not-now takes no other option or instructions." in shown
