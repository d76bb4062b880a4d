"""The notice before an automatic compaction (context/ahead.py): the decision for the context
grown by one turn, with the compaction's price."""

from __future__ import annotations

import dataclasses

import pytest

from ctx_magic.context.ahead import compaction_ahead
from ctx_magic.context.decide import SessionFacts, Situation
from ctx_magic.context.thresholds import compute_thresholds
from ctx_magic.prices import UNKNOWN_PRICES, model_prices

TH = compute_thresholds(200_000, 32_000, env={})  # warning 147,000, autocompact 167,000, blocking 177,000
SONNET = model_prices("claude-sonnet-5-5")  # input $2, 5m writes $2.50, reads $0.10, output $10


def seen(tokens: int, **facts: object) -> Situation:
    return Situation(tokens=tokens, estimated_tokens=0, thresholds=TH, idle_seconds=10.0, idle_limit_seconds=300.0,
                     overhead=3_000, facts=SessionFacts(calls=10, growth=2_000, **facts))  # type: ignore[arg-type]


def test_no_notice_while_one_more_turn_stays_under_the_threshold():
    assert compaction_ahead(seen(160_000), 6_000, warm=True, prices=SONNET, ttl="5m") is None


def test_a_turn_that_would_reach_the_threshold_is_announced_with_its_price():
    ahead = compaction_ahead(seen(163_000), 6_000, warm=True, prices=SONNET, ttl="5m")
    assert ahead is not None and (ahead.tokens, ahead.growth, ahead.threshold) == (163_000, 6_000, 167_000)
    assert ahead.summary_tokens == 4_800 and ahead.tokens_after == 3_000 + 4_800
    # the summary call reads the cached context and writes the summary; the next call writes what is left
    assert ahead.cost_usd == pytest.approx((163_000 * 0.10 + 4_800 * 10 + 7_800 * 2.50) / 1_000_000)
    assert ahead.fits_one_more_turn and "reach the compaction threshold" in ahead.reason


def test_a_cold_cache_makes_the_summary_call_write_the_context_it_reads():
    warm = compaction_ahead(seen(163_000), 6_000, warm=True, prices=SONNET, ttl="5m")
    cold = compaction_ahead(seen(163_000), 6_000, warm=False, prices=SONNET, ttl="5m")
    assert warm is not None and cold is not None
    assert cold.cost_usd - warm.cost_usd == pytest.approx(163_000 * (2.50 - 0.10) / 1_000_000)


def test_a_clearing_that_gets_under_the_threshold_more_cheaply_is_no_compaction():
    # A long summary (20,000 tokens of output) costs more than clearing results near the end.
    clearing = dataclasses.replace(seen(164_000, summary_tokens=20_000), clearable_tokens=60_000,
                                   clear_at_least=20_000, clear_prefix=100_000)
    assert compaction_ahead(clearing, 6_000, warm=True, prices=SONNET, ttl="5m") is None


def test_no_notice_when_auto_compaction_cannot_run():
    assert compaction_ahead(seen(166_000, breaker_open=True), 6_000, warm=True, prices=SONNET, ttl="5m") is None
    assert compaction_ahead(seen(166_000, auto_compaction=False), 6_000, warm=True, prices=SONNET, ttl="5m") is None


def test_one_more_turn_past_the_blocking_limit_cannot_be_let_through():
    ahead = compaction_ahead(seen(174_000), 6_000, warm=True, prices=SONNET, ttl="5m")
    assert ahead is not None and not ahead.fits_one_more_turn


def test_a_deferred_turn_is_still_announced_as_deferred_and_unknown_prices_stay_unknown():
    ahead = compaction_ahead(seen(163_000, deferred=True), 6_000, warm=True, prices=UNKNOWN_PRICES, ttl="5m",
                             deferred=True)
    assert ahead is not None and ahead.deferred and ahead.cost_usd is None
