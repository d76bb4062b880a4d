"""The prompt-cache break detector whose baseline a compaction resets."""

from __future__ import annotations

from ctx_magic.context.cache_break import CacheBaseline, observe
from ctx_magic.messages import Usage

TTL = 300.0


def read(tokens: int, written: int = 0) -> Usage:
    return Usage(10, 5, cache_creation_input_tokens=written, cache_read_input_tokens=tokens)


def test_the_first_response_only_sets_the_baseline():
    baseline, broke = observe(CacheBaseline(), read(50_000), 0.0, ttl_seconds=TTL)
    assert broke is None and baseline.cache_read == 50_000


def test_a_drop_must_pass_both_thresholds():
    base = CacheBaseline(100_000, 0.0)
    # 2,000 tokens exactly: not more than the floor
    assert observe(base, read(98_000), 1.0, ttl_seconds=TTL)[1] is None
    # 4,500 tokens is over the floor but only 4.5 % of the previous read
    assert observe(base, read(95_500), 1.0, ttl_seconds=TTL)[1] is None
    # 3,000 of 20,000 is 15 % and over the floor: a break
    small = CacheBaseline(20_000, 0.0)
    assert observe(small, read(17_000), 1.0, ttl_seconds=TTL)[1] is not None
    # a large share of a small read is churn when under the floor
    assert observe(CacheBaseline(3_000, 0.0), read(1_500), 1.0, ttl_seconds=TTL)[1] is None


def test_growth_is_never_a_break():
    assert observe(CacheBaseline(10_000, 0.0), read(60_000), 1.0, ttl_seconds=TTL)[1] is None


def test_an_unexplained_break_names_the_figures():
    baseline, broke = observe(CacheBaseline(80_000, 0.0, "sig"), read(0, written=81_000), 30.0,
                              ttl_seconds=TTL, signature="sig")
    assert broke is not None and not broke.expected and broke.reason == "unexplained"
    assert (broke.previous_read, broke.cache_read, broke.cache_written) == (80_000, 0, 81_000)
    assert baseline == CacheBaseline(0, 30.0, "sig")


def test_a_break_after_an_idle_gap_over_the_ttl_is_expiry():
    _, broke = observe(CacheBaseline(80_000, 0.0), read(0), TTL + 60, ttl_seconds=TTL)
    assert broke is not None and broke.expected and broke.reason == "the cache expired after 6 min idle"
    _, within = observe(CacheBaseline(80_000, 0.0), read(0), TTL - 1, ttl_seconds=TTL)
    assert within is not None and within.reason == "unexplained"


def test_a_changed_system_prompt_or_tool_list_explains_the_break():
    _, broke = observe(CacheBaseline(80_000, 0.0, "before"), read(1_000), 5.0, ttl_seconds=TTL, signature="after")
    assert broke is not None and broke.expected and "system prompt or the tools" in broke.reason


def test_reset_makes_the_next_response_a_new_baseline_not_a_break():
    baseline = CacheBaseline(90_000, 0.0, "sig").reset()
    assert baseline.cache_read is None and baseline.signature == "sig"
    after, broke = observe(baseline, read(4_000), 10.0, ttl_seconds=TTL, signature="sig")
    assert broke is None and after.cache_read == 4_000
