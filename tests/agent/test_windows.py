"""Models and windows: limits from the Models API first, the current
fallback table (4.x, 5, 5.5; 200k and 1M; 64k and 128k), the 1M-context beta header for the
models that need it, and what a 1M window's thresholds and decision inputs are."""

from __future__ import annotations

import anthropic
import pytest
from agent_rig import rig

from ctx_magic.agent.catalog import LONG_CONTEXT_BETA, table_limits
from ctx_magic.agent.loop import run_turn
from ctx_magic.agent.model import AnthropicModel
from ctx_magic.context.costs import RelativePrices
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.prices import table_prices
from ctx_magic.settings import ModelLimits, Settings

ONE_MILLION = 1_000_000


def test_a_1m_models_limits_come_from_the_models_api_and_set_its_thresholds(tmp_path):
    with rig(tmp_path, window=ONE_MILLION, max_output=128_000) as r:
        limits = r.session.frame.model.limits()
        window = r.session.frame.window
        thresholds = r.session.setup().context.thresholds
        prepared, _ = r.session.prepare()
    assert (limits.window, limits.max_output, limits.source) == (ONE_MILLION, 128_000, "models-api")
    assert (window.tokens, window.reply_cap, window.source) == (ONE_MILLION, 16_384, "models-api")
    # Thresholds: effective = window - min(reply cap, 20,000); the 13,000 / 20,000 / 3,000 buffers unscaled.
    assert thresholds.effective == 1_000_000 - 16_384 == 983_616
    assert (thresholds.autocompact, thresholds.warning, thresholds.blocking) == (970_616, 950_616, 980_616)
    # What the decision gets to weigh carrying ~970,000 tokens on every call against a summary.
    dollars = table_prices("claude-sonnet-5-5")  # input $2, 5m write $2.50, read $0.10, output $10 a million
    assert prepared.situation.facts.prices == RelativePrices(read=0.1 / 2.0, write=2.5 / 2.0, output=10.0 / 2.0)
    assert dollars.input == 2.0
    assert prepared.situation.thresholds == thresholds


@pytest.mark.parametrize(("model", "window", "max_output", "thinking"), [
    ("claude-sonnet-5-5", ONE_MILLION, 128_000, ("adaptive",)),
    ("claude-opus-5-5", ONE_MILLION, 128_000, ("adaptive",)),
    ("claude-haiku-5-5", ONE_MILLION, 128_000, ("adaptive",)),
    ("claude-fable-5-1", ONE_MILLION, 128_000, ("adaptive",)),
    ("claude-sonnet-5", ONE_MILLION, 128_000, ("adaptive",)),
    ("claude-opus-4-8", ONE_MILLION, 128_000, ("adaptive",)),
    ("claude-opus-4-6", ONE_MILLION, 128_000, ("adaptive", "enabled")),
    ("claude-sonnet-4-6", ONE_MILLION, 128_000, ("adaptive", "enabled")),
    ("claude-opus-4-5-20251101", 200_000, 64_000, ("enabled",)),
    ("claude-sonnet-4-5", 200_000, 64_000, ("enabled",)),
    ("claude-haiku-4-5", 200_000, 64_000, ("enabled",)),
])
def test_the_fallback_table_knows_the_current_families(model, window, max_output, thinking):
    limits = table_limits(model)
    assert (limits.window, limits.max_output, limits.thinking_types) == (window, max_output, thinking)


def test_the_table_stands_in_when_the_models_api_cannot_be_reached():
    with serve_in_thread(OfflineAPI()) as (gone, stop):
        stop()
        limits = AnthropicModel(anthropic.Anthropic(api_key="k", base_url=gone, max_retries=0),
                                name="claude-opus-5-5").limits()
    assert (limits.window, limits.max_output, limits.source) == (ONE_MILLION, 128_000, "table")
    window = Settings(model="claude-opus-5-5").resolve(limits)
    assert (window.tokens, window.source) == (ONE_MILLION, "table")


def test_sonnet_4_5_opens_its_1m_window_with_the_beta_header_only_when_asked():
    limits = table_limits("claude-sonnet-4-5")
    assert (limits.window, limits.long_window, limits.long_context_beta) == (200_000, ONE_MILLION, LONG_CONTEXT_BETA)
    assert Settings().resolve(limits).betas == ()
    wide = Settings(context_window=ONE_MILLION).resolve(limits)
    assert (wide.tokens, wide.betas, wide.source) == (ONE_MILLION, (LONG_CONTEXT_BETA,), "config")
    assert Settings(context_window=ONE_MILLION).resolve(table_limits("claude-sonnet-5-5")).betas == ()  # native


@pytest.mark.filterwarnings("ignore:The model 'claude-sonnet-4-5' is deprecated:DeprecationWarning")  # the SDK's
def test_the_stand_in_holds_sonnet_4_5_to_200k_without_the_header_and_the_session_sends_it(tmp_path):
    big = "Here is a long document. " + "lorem ipsum dolor sit amet " * 45_000  # about 250,000 tokens
    ask = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": big}]}
    api = OfflineAPI(OfflineConfig(window=ONE_MILLION, max_output=64_000))
    with serve_in_thread(api) as (url, _stop):
        client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="200000 maximum"):
            client.messages.create(**ask)
        assert client.beta.messages.create(**ask, betas=[LONG_CONTEXT_BETA]).content  # opened by the header
    config = Settings(model="claude-sonnet-4-5", context_window=ONE_MILLION)
    with rig(tmp_path, window=ONE_MILLION, max_output=64_000, config=config) as r:
        model = AnthropicModel(r.session.frame.model.client, name="claude-sonnet-4-5")
        r.session.frame.reconfigure(r.session.frame.settings, model)
        result = run_turn(r.session, "Summarise the plan.\n```python\nprint(1)\n```")
        calls = [q for q in r.api.requests if q.path == "/v1/messages"]
    assert result.error is None and len(calls) == 2
    assert all(LONG_CONTEXT_BETA in q.betas and q.status == 200 for q in calls)


def test_a_thinking_type_the_model_lacks_becomes_the_one_it_takes():
    adaptive_only = ModelLimits(ONE_MILLION, 128_000, "table", thinking_types=("adaptive",))
    budget_only = ModelLimits(200_000, 64_000, "table", thinking_types=("enabled",))
    assert Settings(thinking="enabled").resolve(adaptive_only).thinking == "adaptive"
    assert Settings(thinking="adaptive").resolve(budget_only).thinking == "enabled"
    assert Settings(thinking="enabled").resolve(ModelLimits(200_000, 8_192, "table", thinking_types=())).thinking == \
        "off"
    small = Settings(thinking="enabled", thinking_budget=8_000).resolve(ModelLimits(20_000, 4_096, "table"))
    assert (small.reply_cap, small.thinking_budget, small.max_tokens) == (3_072, 1_024, 4_096)  # the API's minimum
