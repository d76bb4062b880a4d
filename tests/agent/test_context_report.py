"""The context as scripts and hooks read it (agent/status.py `ContextReport`), the cache's state
and the price of the next call, the notice before an automatic compaction, a PreCompact hook's
veto and the user's deferral: over real HTTP against the stand-in, on a manual clock."""

from __future__ import annotations

import dataclasses

import pytest
from agent_rig import rig

from ctx_magic.agent.compaction import manual_compact
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.plugins import Veto
from ctx_magic.agent.status import ContextReport
from ctx_magic.events import Compacted, Notice
from ctx_magic.settings import Settings

# A 20,000-token window compacting at half of it: warning 5,952, autocompact 7,952, blocking 15,604,
# so a deferral or a veto has room to hold for a few turns.
EARLY = Settings(autocompact_pct=50)


def wordy(n: int) -> str:
    """A turn of plain text (about a thousand tokens with the answer): nothing a clearing could take."""
    return f"Turn {n}: " + " ".join(f"word{n}x{i}" for i in range(150))


def first_answer_after(messages, prompt_start: str):  # type: ignore[no-untyped-def]
    """The first answer the model gave after the user's message starting with `prompt_start`."""
    at = max(i for i, m in enumerate(messages) if m.role == "user" and m.text.startswith(prompt_start))
    return next(m for m in messages[at:] if m.role == "assistant" and m.api_id)


def test_the_report_holds_the_status_figures_and_reads_as_text_and_html(tmp_path):
    with rig(tmp_path) as r:
        run_turn(r.session, wordy(0))
        run_turn(r.session, wordy(1))
        status, report = r.session.status(), r.session.status().report()
    c = status.context
    assert isinstance(report, ContextReport)
    assert (report.tokens, report.window, report.zone) == (c.tokens, c.window, c.zone)
    assert dataclasses.astuple(report.thresholds) == (c.warning, c.threshold, c.blocking)
    assert report.spent_usd == round(status.usage.cost_usd, 6) and report.spent_usd > 0.001
    assert report.compactions == 0 and report.last_compaction is None
    assert report.cache is not None and report.cache.state == "warm" and report.cache.ttl == "5m"
    assert report.cache.expires_at == r.clock.now + 300  # the clock stood still since the last answer
    assert f"{c.tokens:,} of {c.window:,}" in repr(report) and f"{c.tokens:,} of {c.window:,}" in report._repr_html_()
    assert report.to_json()["thresholds"] == {"warning": c.warning, "autocompact": c.threshold, "blocking": c.blocking}
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.tokens = 0  # type: ignore[misc]


def test_past_the_ttl_the_predicted_write_is_what_the_next_call_is_billed(tmp_path):
    with rig(tmp_path) as r:
        for n in range(3):
            run_turn(r.session, wordy(n))
        r.clock.advance(301)
        cache = r.session.status().report().cache
        assert cache is not None and cache.cold and cache.reason.startswith("idle 5 min")
        run_turn(r.session, "Go on.")
        usage = first_answer_after(r.session.live.messages, "Go on.").usage
        prices = r.session.frame.prices()
    assert usage.cache_read_input_tokens == 0  # the stand-in's cache expired on the same clock
    billed = usage.cache_creation_input_tokens * prices.cache_write_5m / 1_000_000
    assert cache.write_usd == pytest.approx(billed, rel=0.01)


def test_a_changed_system_prompt_makes_the_next_call_a_rewrite_before_the_ttl(tmp_path):
    with rig(tmp_path, model="claude-sonnet-4-6") as r:  # no prefix check: its system prompt may change
        run_turn(r.session, wordy(0))
        r.session.frame.set_memory_section("Remember: the units are metres.")
        cache = r.session.status().report().cache
    assert cache is not None and cache.cold
    assert cache.reason == "the system prompt or the tools changed since the last call"


def test_an_append_only_conversation_keeps_its_system_prompt_and_its_cache_warm_through_a_memory(tmp_path):
    with rig(tmp_path) as r:  # claude-sonnet-5-5: the memory comes as a new message, the prefix stays
        run_turn(r.session, wordy(0))
        r.session.frame.set_memory_section("Remember: the units are metres.")
        cache = r.session.status().report().cache
    assert cache is not None and cache.state == "warm"


def test_a_hook_with_a_context_parameter_gets_the_figures_and_a_two_argument_hook_works_as_before(tmp_path):
    given: list[ContextReport] = []
    with rig(tmp_path) as r:
        r.session.hooks.add("PreCompact", lambda trigger, instructions: f"old hook ({trigger})")
        r.session.hooks.add("PreCompact", lambda trigger, instructions, context: given.append(context))
        run_turn(r.session, wordy(0))
        before = r.session.status().report()
        manual_compact(r.session)
        prompt = r.api.requests[-1].body["compaction"]["instructions"]  # the API writes the summary
    assert "old hook (manual)" in prompt
    assert given == [before]


def test_a_veto_of_a_compaction_asked_for_is_said_and_overridden(tmp_path):
    seen: list[object] = []
    with rig(tmp_path) as r:
        r.session.listeners.append(seen.append)
        r.session.hooks.add("PreCompact", lambda trigger, instructions, **_: Veto("mid-analysis"))
        run_turn(r.session, wordy(0))
        manual_compact(r.session)
    assert [e.trigger for e in seen if isinstance(e, Compacted)] == ["manual"]
    assert any(isinstance(e, Notice) and "vetoed this compaction (mid-analysis); overridden" in e.text for e in seen)


def test_the_turn_before_an_automatic_compaction_knows_it_and_what_it_costs(tmp_path):
    with rig(tmp_path, config=EARLY) as r:
        n = 0
        while r.session.status().ahead is None:
            assert not run_turn(r.session, wordy(n)).compactions
            n += 1
            assert n < 10
        ahead = r.session.status().ahead
        result = run_turn(r.session, wordy(n))
    assert ahead is not None and ahead.tokens + ahead.growth >= ahead.threshold > ahead.tokens
    assert ahead.cost_usd is not None and ahead.cost_usd > 0 and ahead.fits_one_more_turn
    assert result.compactions == ["auto"]


def test_a_deferred_turn_goes_through_uncompacted_and_the_one_after_compacts(tmp_path):
    with rig(tmp_path, config=EARLY) as r:
        n = 0
        while r.session.status().ahead is None:
            run_turn(r.session, wordy(n))
            n += 1
        r.session.defer_compaction()
        ahead = r.session.status().ahead
        let_through = run_turn(r.session, wordy(n))
        over = r.session.status().context
        after = run_turn(r.session, wordy(n + 1))
    assert ahead is not None and ahead.deferred
    assert let_through.compactions == [] and over.threshold <= over.tokens < over.blocking
    assert "the user let this turn through" in over.plan
    assert after.compactions == ["auto"]


def test_a_hook_s_veto_holds_back_auto_compaction_once_said_until_the_blocking_limit_overrides_it(tmp_path):
    seen: list[object] = []
    given: list[ContextReport] = []

    def hold(trigger: str, instructions: str | None, context: ContextReport) -> Veto:
        given.append(context)
        return Veto("mid-analysis")

    with rig(tmp_path, config=EARLY) as r:
        r.session.listeners.append(seen.append)
        r.session.hooks.add("PreCompact", hold)
        held = 0
        for n in range(20):
            result = run_turn(r.session, wordy(n))
            if result.compactions:
                break
            held += bool(given)
        vetoes = [e.text for e in seen if isinstance(e, Notice) and "held back" in e.text]
        overridden = [e.text for e in seen if isinstance(e, Notice) and "overridden" in e.text]
        blocking = r.session.status().context.blocking
    assert held >= 2 and len(vetoes) == held  # once a turn, each turn it held
    assert vetoes[0] == "A PreCompact hook held back the automatic compaction: mid-analysis"
    assert all(c.tokens < blocking for c in given[:-1]) and given[-1].tokens >= blocking
    assert overridden == ["A PreCompact hook vetoed the automatic compaction (mid-analysis); overridden: the context "
                          "is past the blocking limit."]
    assert result.compactions == ["auto"]
