"""Cost in dollars: the price table, a session's spend worked out by hand, the
long-prompt rates, contract prices, and the savings of the context changes."""

from __future__ import annotations

import pytest
from agent_rig import rig
from traitlets import TraitError

from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.usage import UsageMeter
from ctx_magic.events import UsageUpdated
from ctx_magic.messages import Usage
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.prices import UNKNOWN_PRICES, Billed, Prices, cost_usd, format_usd, model_prices, table_prices
from ctx_magic.settings import Settings

SONNET_5_5 = lambda: table_prices("claude-sonnet-5-5")  # noqa: E731 - read at call time


def test_a_scripted_session_costs_what_the_arithmetic_says():
    """Three calls on Sonnet 5.5 ($2 input, $2.50 5m write, $4 1h write, $0.10 read, $10 output
    per million tokens), then a compaction's summary call, by hand."""
    meter = UsageMeter(prices=SONNET_5_5)
    # 1: a cold start writes 12,000 tokens to the 5-minute cache, answers in 800 tokens.
    first = meter.add(Usage(input_tokens=40, output_tokens=800, cache_creation_input_tokens=12_000))
    assert first == pytest.approx((40 * 2 + 12_000 * 2.50 + 800 * 10) / 1e6)  # = 0.03808
    # 2: reads those 12,000, writes 3,000 new ones for an hour, answers in 1,200.
    second = meter.add(Usage(input_tokens=10, output_tokens=1_200, cache_creation_input_tokens=3_000,
                             cache_read_input_tokens=12_000, cache_creation_1h_input_tokens=3_000))
    assert second == pytest.approx((10 * 2 + 3_000 * 4 + 12_000 * 0.10 + 1_200 * 10) / 1e6)  # = 0.02522
    # 3: a summary call reading 15,000 and writing 2,000 more for five minutes, 4,000 out.
    third = meter.add(Usage(input_tokens=0, output_tokens=4_000, cache_creation_input_tokens=2_000,
                            cache_read_input_tokens=15_000))
    assert third == pytest.approx((2_000 * 2.50 + 15_000 * 0.10 + 4_000 * 10) / 1e6)  # = 0.0465
    totals = meter.snapshot()
    assert totals.cost_usd == pytest.approx(0.03808 + 0.02522 + 0.0465)  # = 0.1098
    assert totals.calls == 3 and format_usd(totals.cost_usd) == "$0.1098"


def test_the_savings_are_the_tokens_taken_out_priced_at_the_cache_read_rate():
    meter = UsageMeter(prices=SONNET_5_5)
    meter.freed("persisted", 14_000)  # a large output went to disk
    meter.count_savings()  # a main call made without it: 14,000 x $0.10 / 1M = $0.0014
    meter.freed("compacted", 100_000)  # a compaction took 100,000 tokens out
    meter.count_savings(server_cleared=5_000)  # and the server's edits 5,000 from this call
    saved = meter.snapshot().saved_usd
    assert saved["persisted"] == pytest.approx(2 * 14_000 * 0.10 / 1e6)  # two calls without it: $0.0028
    assert saved["compacted"] == pytest.approx(100_000 * 0.10 / 1e6)  # one call: $0.01
    assert saved["cleared"] == pytest.approx(5_000 * 0.10 / 1e6)  # $0.0005


def test_long_prompts_bill_every_token_at_the_long_rates():
    haiku = table_prices("claude-haiku-5-5")
    short = Billed(input_tokens=90_000, output_tokens=1_000)
    long = Billed(input_tokens=20_000, cache_read_tokens=90_000, output_tokens=1_000)  # 110,000 > 100,000
    assert cost_usd(short, haiku) == pytest.approx((90_000 * 0.10 + 1_000 * 0.50) / 1e6)  # $0.0095
    assert cost_usd(long, haiku) == pytest.approx((20_000 * 0.50 + 90_000 * 0.05 + 1_000 * 2.50) / 1e6)  # $0.017
    sonnet_1m = table_prices("claude-sonnet-4-5")  # the 1M beta: $6 / $22.50 over 200,000 prompt tokens
    assert cost_usd(Billed(input_tokens=300_000, output_tokens=2_000), sonnet_1m) == pytest.approx(
        (300_000 * 6 + 2_000 * 22.50) / 1e6)  # $1.845


@pytest.mark.parametrize(("model", "row"), [
    ("claude-opus-5-5", (4.00, 5.00, 8.00, 0.20, 20.00)),
    ("claude-opus-4-6", (5.00, 6.25, 10.00, 0.50, 25.00)),
    ("claude-opus-4-1-20250805", (15.00, 18.75, 30.00, 1.50, 75.00)),
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", (3.00, 3.75, 6.00, 0.30, 15.00)),
    ("claude-haiku-4-5@20251001", (1.00, 1.25, 2.00, 0.10, 5.00)),
    ("claude-fable-5-1", (10.00, 12.50, 20.00, 0.25, 50.00)),
])
def test_the_price_table_by_model_and_provider_id(model, row):
    assert tuple(table_prices(model).figures().values()) == row


def test_contract_prices_override_the_table_and_are_checked_when_set():
    contract = model_prices("claude-sonnet-5-5", "input=1.5, output=7.5 cache_read=0.05")
    assert (contract.input, contract.output, contract.cache_read, contract.cache_write_5m) == (1.5, 7.5, 0.05, 2.50)
    assert contract.source == "config"
    assert model_prices("gpt-x") is UNKNOWN_PRICES and model_prices("gpt-x", "input=1 output=2").source == "config"
    CtxMagic().prices = "input=2 output=9"
    with pytest.raises(TraitError, match="expected name=value"):
        CtxMagic().prices = "cheap please"
    with pytest.raises(TraitError, match="cannot be negative"):
        CtxMagic().prices = "input=-1"
    with pytest.raises(ValueError, match="a number of dollars"):
        Prices.parse("output=ten")


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-inf"])
def test_a_contract_price_that_is_not_a_finite_number_is_refused(value):
    """A price of nan or inf would make every later figure of the session nan or inf."""
    with pytest.raises(TraitError, match="a finite number of dollars"):
        CtxMagic().prices = f"output={value}"


def test_a_sessions_spend_is_the_sum_of_its_responses_at_the_model_prices(tmp_path):
    """End to end on the stand-in: every response's usage (as the API reported it) priced by the
    table's Sonnet 5.5 rates, summed per turn and per session; writes go to the 1-hour cache."""
    with rig(tmp_path, window=200_000, max_output=64_000, config=Settings(cache_ttl="1h")) as r:
        seen: list[UsageUpdated] = []
        r.session.listeners.append(lambda e: seen.append(e) if isinstance(e, UsageUpdated) else None)
        turns = [run_turn(r.session, text) for text in ("Summarise the plan in one line. " * 200,
                                                        "And the risks? " * 10)]
        status = r.session.status()

    def by_hand(u: Usage) -> float:
        five_minute = u.cache_creation_input_tokens - u.cache_creation_1h_input_tokens
        return (u.input_tokens * 2 + five_minute * 2.50 + u.cache_creation_1h_input_tokens * 4
                + u.cache_read_input_tokens * 0.10 + u.output_tokens * 10) / 1e6

    assert len(seen) == 2 and all(e.usage.cache_creation_1h_input_tokens == e.usage.cache_creation_input_tokens
                                  for e in seen)
    assert seen[1].usage.cache_read_input_tokens > 0  # the second call read the first one's prefix
    assert [round(t.cost_usd, 9) for t in turns] == [round(by_hand(e.usage), 9) for e in seen]
    assert status.usage.cost_usd == pytest.approx(sum(by_hand(e.usage) for e in seen))
    assert status.to_json()["cost"]["prices_per_mtok"] == {"input": 2.0, "cache_write_5m": 2.5,
                                                           "cache_write_1h": 4.0, "cache_read": 0.1, "output": 10.0}


def test_a_resumed_sessions_side_calls_count_in_its_spend(tmp_path):
    """The resumed session's meter is the one its parts report to: a summary call made after the
    resume adds to the spend state.json brought back."""
    from agent_rig import prompt

    from ctx_magic.agent.compaction import manual_compact
    from ctx_magic.agent.session import open_session

    with rig(tmp_path) as r:
        for n in range(3):
            run_turn(r.session, prompt(n))
        r.session.end_turn()
        resumed, _ = open_session(r.session.frame.model, r.session.frame.executor, tmp_path / ".ctx_magic",
                                  session_id=r.session.session_id, resume=True, root=tmp_path, clock=r.clock)
        before = resumed.status().usage.calls
        manual_compact(resumed)
        assert resumed.status().usage.calls == before + 1
