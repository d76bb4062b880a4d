"""The one decision before each model call (context/decide.py): SPEC L3's triggers, L4's
threshold, L6's breaker, the recursion guard, and the reason given for each choice."""

from __future__ import annotations

import dataclasses

from ctx_magic.context.decide import COMPACT_FROM_NOTES, COMPACT_WITH_SUMMARY, NOTHING, Situation, decide
from ctx_magic.context.thresholds import compute_thresholds

TH = compute_thresholds(200_000, 32_000, env={})  # warning 147,000, autocompact 167,000, blocking 177,000


def situation(tokens: int, **kw: object) -> Situation:
    base = Situation(tokens=tokens, estimated_tokens=0, thresholds=TH, idle_seconds=10.0, idle_limit_seconds=300.0,
                     clear_at_least=20_000)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_a_small_warm_context_needs_nothing():
    plan = decide(situation(50_000, clearable_tokens=30_000))
    assert (plan.clear, plan.compact, plan.zone, plan.reason) == (None, (), "ok", NOTHING)


def test_after_an_idle_gap_over_the_ttl_old_results_are_cleared_whatever_the_size():
    plan = decide(situation(10_000, clearable_tokens=500, idle_seconds=301.0))
    assert plan.clear == "idle" and plan.tokens_after == 9_500
    assert "prompt cache has expired" in plan.reason


def test_under_pressure_clearing_needs_enough_to_free():
    assert decide(situation(150_000, clearable_tokens=19_999)).clear is None
    plan = decide(situation(150_000, clearable_tokens=20_000))
    assert plan.clear == "pressure" and plan.tokens_after == 130_000 and plan.zone == "ok"


def test_below_the_warning_level_there_is_no_pressure():
    assert decide(situation(146_999, clearable_tokens=100_000)).clear is None


def test_pressure_clearing_that_cannot_avoid_the_compaction_is_skipped():
    plan = decide(situation(190_000, clearable_tokens=20_000))
    assert plan.clear is None and plan.compact == (COMPACT_WITH_SUMMARY,)
    without_compaction = decide(situation(190_000, clearable_tokens=20_000, breaker_open=True))
    assert without_compaction.clear == "pressure"


def test_at_the_threshold_the_notes_are_tried_before_a_summary():
    assert decide(situation(167_000)).compact == (COMPACT_WITH_SUMMARY,)
    assert decide(situation(167_000, notes_ready=True)).compact == (COMPACT_FROM_NOTES, COMPACT_WITH_SUMMARY)
    assert decide(situation(166_999)).compact == ()


def test_an_estimated_count_is_checked_with_the_api_before_compacting():
    plan = decide(situation(170_000, estimated_tokens=4_000))
    assert plan.check_exact and "the API counts first" in plan.reason
    exact = decide(situation(170_000, estimated_tokens=4_000).with_exact_count(160_000))
    assert not exact.check_exact and exact.compact == () and exact.zone == "warning"


def test_the_breaker_and_the_recursion_guard_stop_auto_compaction_and_say_why():
    broken = decide(situation(180_000, breaker_open=True))
    assert broken.compact == () and broken.zone == "blocked"
    assert "off after repeated failures" in broken.reason and "blocking limit" in broken.reason
    inside = decide(situation(170_000, auto_compaction=False))
    assert inside.compact == () and "cannot run here" in inside.reason


def test_a_second_decision_after_clearing_keeps_the_clearing_and_its_reason():
    first = decide(situation(150_000, clearable_tokens=20_000))
    second = decide(situation(170_000, may_clear=False)).after(first)
    assert second.clear == "pressure" and second.compact == (COMPACT_WITH_SUMMARY,)
    assert second.reason.startswith("over the warning level") and "compaction threshold" in second.reason
