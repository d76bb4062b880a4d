"""The one decision before each model call (context/decide.py): microcompact's triggers priced by
what they cost and save (costs.py), the auto-compact threshold, the circuit breaker, the recursion guard, and the
reason given for each choice."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from ctx_magic.context.costs import Outlook, RelativePrices, Start, call_cost, outlook_cost
from ctx_magic.context.decide import (
    COMPACT_FROM_NOTES,
    COMPACT_WITH_SUMMARY,
    NOTHING,
    SessionFacts,
    Situation,
    context_tools_from_start,
    decide,
)
from ctx_magic.context.snip_price import SnipPrice
from ctx_magic.context.thresholds import compute_thresholds

TH = compute_thresholds(200_000, 32_000, env={})  # warning 147,000, autocompact 167,000, blocking 177,000
MILLION = compute_thresholds(1_000_000, 32_000, env={})


def situation(tokens: int, *, calls: int = 10, growth: int = 2_000, notes_tokens: int = 0, th=TH,
              **kw: object) -> Situation:
    facts = SessionFacts(calls=calls, growth=growth, notes_tokens=notes_tokens,
                         **{k: kw.pop(k) for k in ("auto_compaction", "breaker_open", "summary_tokens",
                                                   "after_compaction", "deferred", "summary_by_api") if k in kw})
    base = Situation(tokens=tokens, estimated_tokens=0, thresholds=th, idle_seconds=10.0, idle_limit_seconds=300.0,
                     clear_at_least=20_000, overhead=3_000, facts=facts)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


# -- the arithmetic ---------------------------------------------------------------------------------


def test_a_call_reads_what_the_cache_holds_and_writes_the_rest():
    assert call_cost(10_000, 8_000, RelativePrices()) == 8_000 * 0.1 + 2_000 * 1.25
    assert call_cost(10_000, 8_000, RelativePrices.for_ttl("1h")) == 8_000 * 0.1 + 2_000 * 2.0


def test_the_outlook_plays_calls_forward_and_prices_a_forced_compaction():
    outlook = Outlook(calls=3, growth=1_000, threshold=12_500, after_compaction=2_000, summary_output=500)
    # call 1 sends 10,000 (cached) -> 11,000; call 2 sends 11,000 (10,000 cached) -> 12,000;
    # call 3 sends 12,000 (11,000 cached) -> 13,000 reaches the threshold: the summary call reads
    # 12,000, writes 1,000 and answers 500 tokens of output.
    expected = (10_000 * 0.1) + (10_000 * 0.1 + 1_000 * 1.25) + (11_000 * 0.1 + 1_000 * 1.25) \
        + (12_000 * 0.1 + 1_000 * 1.25 + 500 * 5.0)
    assert outlook_cost(Start(10_000, 10_000), outlook, RelativePrices()) == expected


# -- the choices ------------------------------------------------------------------------------------


def test_a_small_warm_context_needs_nothing():
    plan = decide(situation(50_000, clearable_tokens=30_000))
    assert (plan.clear, plan.compact, plan.zone, plan.reason) == (None, (), "ok", NOTHING)


def test_cold_cache_clears_whatever_the_size_and_the_session():
    plan = decide(situation(10_000, clearable_tokens=500, idle_seconds=301.0, calls=1))
    assert plan.clear == "idle" and plan.tokens_after == 9_500
    assert "prompt cache has expired" in plan.reason


def test_warm_cache_and_a_small_saving_waits():
    """Past the warning level a clearing would free 20,000 tokens, but the session has made
    three calls: rewriting the 130,000 tokens after the first cleared result does not pay back."""
    plan = decide(situation(150_000, clearable_tokens=20_000, clear_prefix=5_000, calls=3))
    assert plan.clear is None and plan.compact == ()


def test_warm_cache_and_a_long_session_clears_when_it_pays_back():
    """With auto-compaction off (the breaker), clearing is the only way to lighten the calls:
    rewriting 85,000 tokens once pays back within a long session, not within a short one."""
    plan = decide(situation(150_000, clearable_tokens=60_000, clear_prefix=5_000, calls=150, breaker_open=True))
    assert plan.clear == "pressure" and plan.tokens_after == 90_000 and plan.zone == "ok"
    assert "it pays back" in plan.reason
    assert decide(situation(150_000, clearable_tokens=60_000, clear_prefix=5_000, calls=4,
                            breaker_open=True)).clear is None


def test_while_a_summary_is_coming_a_clearing_that_only_delays_it_does_not_pay():
    """Past the warning level the threshold is near: the summary will shrink the context to a
    few thousand tokens anyway, and rewriting 85,000 tokens now to delay it costs more."""
    plan = decide(situation(150_000, clearable_tokens=60_000, clear_prefix=5_000, calls=150))
    assert plan.clear is None and plan.compact == ()


def test_below_the_warning_level_there_is_no_pressure_clearing():
    assert decide(situation(146_999, clearable_tokens=100_000, calls=200)).clear is None


def test_a_big_window_and_a_long_session_compact_before_the_threshold():
    """On a 1,000,000 window a 400,000-token context is carried at 40,000 token-prices a call;
    a summary costs about one such call plus its output: with 100 calls ahead it pays."""
    long = decide(situation(400_000, th=MILLION, calls=100, growth=3_000))
    assert long.compact == (COMPACT_WITH_SUMMARY,) and "summarizing now costs less" in long.reason
    short = decide(situation(400_000, th=MILLION, calls=1, growth=3_000))
    assert short.compact == ()  # a session that may end now is not summarized early
    small = decide(situation(150_000, th=MILLION, calls=500, growth=3_000))
    assert small.compact == ()  # within a standard window's size, only the threshold compacts


def test_at_the_threshold_the_cheapest_way_under_it_is_taken():
    assert decide(situation(167_000)).compact == (COMPACT_WITH_SUMMARY,)
    with_notes = decide(situation(167_000, notes_tokens=4_000))
    assert with_notes.compact == (COMPACT_FROM_NOTES, COMPACT_WITH_SUMMARY)  # no summary output to pay
    # A long summary (20,000 tokens of output) costs more than clearing results near the end.
    cleared = decide(situation(170_000, clearable_tokens=60_000, clear_prefix=100_000, summary_tokens=20_000))
    assert cleared.clear == "pressure" and cleared.compact == () and cleared.tokens_after == 110_000
    not_enough = decide(situation(190_000, clearable_tokens=20_000))
    assert not_enough.clear is None and not_enough.compact == (COMPACT_WITH_SUMMARY,)


def test_a_summary_the_api_writes_is_priced_as_one_that_reads_the_cached_conversation_and_says_who_writes_it():
    """On demand the API reads the conversation as the main call's cached prefix, writes the
    summary, and the next call writes the new context: the price the summary option carries, so
    the same choices are made, and the plan names who writes it."""
    for tokens, kw in ((167_000, {}), (170_000, {"clearable_tokens": 60_000, "clear_prefix": 100_000,
                                                 "summary_tokens": 20_000}), (150_000, {})):
        ours, api = decide(situation(tokens, **kw)), decide(situation(tokens, summary_by_api=True, **kw))
        assert (api.compact, api.clear, api.tokens_after) == (ours.compact, ours.clear, ours.tokens_after)
        assert ("the API writes the summary" in api.reason) == bool(api.compact)
        assert "the API writes the summary" not in ours.reason
    assert decide(situation(167_000, summary_by_api=True)).compact == (COMPACT_WITH_SUMMARY,)


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
    first = decide(situation(150_000, clearable_tokens=60_000, clear_prefix=5_000, calls=150, breaker_open=True))
    second = decide(situation(170_000, may_clear=False)).after(first)
    assert second.clear == "pressure" and second.compact == (COMPACT_WITH_SUMMARY,)
    assert second.reason.startswith("150,000 tokens, past the warning level") and "threshold" in second.reason


def test_an_early_compaction_is_weighed_from_claude_codes_trigger_and_only_as_a_summary():
    """At 32,000 Claude Code compacts at 9,920 tokens (the window less its 20,000-token summary
    reserve and the scaled buffer) and ctx_magic's threshold is 21,920: between the two the price
    decides, and the session's notes are no option before the threshold forces a compaction. A
    growing session waits (compacting sooner only means compacting more often); one that carries
    the same 15,000 tokens call after call for long is summarized."""
    small = compute_thresholds(32_000, 8_000, env={})
    assert small.autocompact == 21_920
    growing = decide(situation(15_000, th=small, calls=200, growth=600, notes_tokens=2_000))
    assert growing.compact == ()
    still = decide(situation(15_000, th=small, calls=200, growth=10, notes_tokens=2_000))
    assert still.compact == (COMPACT_WITH_SUMMARY,) and "summarizing now costs less" in still.reason
    assert decide(situation(9_000, th=small, calls=200, growth=10)).compact == ()  # under Claude Code's trigger
    assert decide(situation(15_000, th=small, calls=5, growth=10)).compact == ()  # it may end soon


# -- a deferral by the user -----------------------------------------------------------------------


def test_a_deferred_turn_goes_on_uncompacted_past_the_threshold_and_says_why():
    plan = decide(situation(170_000, deferred=True))
    assert plan.compact == () and plan.zone == "compacting"
    assert "the user let this turn through (until the blocking limit 177,000)" in plan.reason


def test_a_deferral_never_holds_past_the_blocking_limit():
    plan = decide(situation(178_000, deferred=True))
    assert plan.compact == (COMPACT_WITH_SUMMARY,)
    assert "the user's deferral ends at the blocking limit 177,000" in plan.reason


def test_append_only_a_pressure_clearing_prices_the_thinking_it_drops():
    """Clearing an old result in an append-only conversation drops the thinking after it too:
    cheaper to carry, but its reasoning is lost (priced as the output to think it again), so a
    clearing that pays back with no thinking after it does not with much (60 calls to come)."""
    plain = situation(150_000, clearable_tokens=60_000, clear_prefix=5_000, calls=60, breaker_open=True)
    assert decide(plain).clear == "pressure"
    costly = dataclasses.replace(plain, thinking_after_clear=40_000)
    assert decide(costly).clear is None
    light = dataclasses.replace(plain, thinking_after_clear=2_000)
    plan = decide(light)
    assert plan.clear == "pressure" and plan.tokens_after == 88_000
    assert "drops 2,000 tokens of thinking" in plan.reason


# -- a snip past the message limit, priced -----------------------------------------------------------

MIDDLE = SnipPrice(freed=30_000, prefix=5_000, messages=120)  # a snip of half a 60,000-token context


def test_a_snip_is_made_when_it_pays_back_and_not_in_a_short_session():
    """Past the message limit the middle may go: 30,000 tokens less on each of 30 calls to come pay
    for writing the tail again; with 3 calls to come they do not, and the context stays as it is."""
    plan = decide(situation(60_000, calls=30, snip=MIDDLE))
    assert plan.snip and plan.tokens_after == 30_000 and plan.clear is None and plan.compact == ()
    assert plan.reason.startswith("60,000 tokens: snipping 120 messages from the middle frees 30,000 (it pays back")
    assert not decide(situation(60_000, calls=3, snip=MIDDLE)).snip
    assert decide(situation(60_000, calls=3, snip=MIDDLE)).reason == NOTHING


def test_a_snip_on_a_model_with_the_prefix_check_prices_the_thinking_it_drops():
    """The same snip on a model that checks each thinking block's prefix drops the kept tail's
    thinking: 3,000 tokens of it, thought again as output, cost more than the snip saves."""
    assert decide(situation(60_000, calls=30, snip=MIDDLE)).snip  # a model without the check snips
    checked = dataclasses.replace(MIDDLE, thinking=3_000)
    plan = decide(situation(60_000, calls=30, snip=checked))
    assert not plan.snip and plan.reason == NOTHING
    light = decide(situation(60_000, calls=30, snip=dataclasses.replace(MIDDLE, thinking=300)))
    assert light.snip and light.tokens_after == 29_700 and "drops 300 tokens of thinking after it" in light.reason


def test_a_snip_costs_nothing_once_the_cache_has_expired():
    plan = decide(situation(60_000, calls=1, snip=MIDDLE, idle_seconds=301.0))
    assert plan.snip and plan.tokens_after == 30_000


def test_at_the_threshold_a_summary_beats_a_snip_unless_no_compaction_can_run():
    snip = SnipPrice(freed=80_000, prefix=10_000, messages=150)
    plan = decide(situation(170_000, calls=30, snip=snip))
    assert plan.compact == (COMPACT_WITH_SUMMARY,) and not plan.snip
    stuck = decide(situation(170_000, calls=30, snip=snip, breaker_open=True))
    assert stuck.snip and stuck.tokens_after == 90_000 and stuck.compact == ()


def test_the_context_tools_start_with_a_conversation_only_when_its_first_request_is_past_the_warning_level():
    assert not context_tools_from_start([], TH)
    assert not context_tools_from_start([TH.warning - 1], TH)
    assert context_tools_from_start([TH.warning - 10, 10], TH)

    def counted() -> Iterator[int]:  # a long transcript: read only until the sum reaches the warning level
        yield TH.warning
        raise AssertionError("counted past the warning level")

    assert context_tools_from_start(counted(), TH)
