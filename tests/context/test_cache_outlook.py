"""The prompt cache as the next call finds it (context/cache_outlook.py): warm within its lifetime,
cold past it or once the prefix is rewritten, and a cold cache's write priced before the call."""

from __future__ import annotations

import pytest

from ctx_magic.context.cache_outlook import cache_outlook
from ctx_magic.prices import UNKNOWN_PRICES, model_prices

SONNET = model_prices("claude-sonnet-4-5")  # input $3, writes $3.75 (5m) / $6 (1h)


def outlook(now: float, *, last: float | None = 1_000.0, ttl: str = "5m", rewritten: str = "", tokens: int = 40_000,
            prices=SONNET):  # type: ignore[no-untyped-def]
    return cache_outlook(tokens=tokens, last_call_at=last, now=now, ttl=ttl,
                         ttl_seconds={"5m": 300.0, "1h": 3600.0}[ttl], rewritten=rewritten, prices=prices)


def test_within_its_lifetime_the_cache_is_warm_and_the_next_call_writes_nothing():
    seen = outlook(1_000.0 + 120)
    assert (seen.state, seen.write_tokens, seen.write_usd) == ("warm", 0, 0.0)
    assert seen.expires_at == 1_300.0 and seen.seconds_left == 180.0


def test_past_its_lifetime_the_whole_context_is_written_at_one_and_a_quarter_times_input():
    seen = outlook(1_000.0 + 301)
    assert seen.cold and seen.write_tokens == 40_000
    assert seen.write_usd == pytest.approx(40_000 * 3.75 / 1_000_000)
    assert seen.reason == "idle 5 min, past the cache's 5m lifetime" and seen.seconds_left == 0.0


def test_the_hour_lifetime_lasts_an_hour_and_writes_at_twice_input():
    assert outlook(1_000.0 + 3_000, ttl="1h").state == "warm"
    seen = outlook(1_000.0 + 3_601, ttl="1h")
    assert seen.cold and seen.write_usd == pytest.approx(40_000 * 6.00 / 1_000_000)


def test_a_rewritten_prefix_is_cold_whatever_the_clock_says():
    seen = outlook(1_000.0 + 10, rewritten="the model changed")
    assert seen.cold and seen.reason == "the model changed" and seen.write_tokens == 40_000


def test_before_any_call_nothing_is_cached_and_the_first_call_writes_it_all_without_being_cold():
    seen = outlook(5.0, last=None)
    assert (seen.state, seen.cold, seen.expires_at) == ("empty", False, None)
    assert seen.write_tokens == 40_000 and seen.reason == "no call has cached this context yet"


def test_a_long_prompt_is_priced_at_the_model_s_long_prompt_rate():
    seen = outlook(1_000.0 + 301, tokens=250_000)  # Sonnet 4.5 bills prompts past 200,000 at its long rates
    assert seen.write_usd == pytest.approx(250_000 * 7.50 / 1_000_000)


def test_unknown_prices_leave_the_dollars_unknown_not_zero():
    seen = outlook(1_000.0 + 301, prices=UNKNOWN_PRICES)
    assert seen.write_tokens == 40_000 and seen.write_usd is None


def test_a_setting_waiting_for_the_next_turn_turns_a_warm_outlook_cold_at_the_new_prices():
    warm = outlook(1_000.0 + 10)
    seen = warm.rewritten("the model changes", 40_000, model_prices("claude-opus-4-1"))
    assert seen.cold and seen.write_usd == pytest.approx(40_000 * 18.75 / 1_000_000)
    assert outlook(1_000.0 + 301).rewritten("x", 1, SONNET).reason.startswith("idle")  # already cold: as it was
