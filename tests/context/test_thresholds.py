"""The window and its thresholds, scaled: effective window, thresholds, zones, overrides."""

from __future__ import annotations

import pytest

from ctx_magic.context.thresholds import (
    compute_thresholds,
)


def test_200k_window_with_large_output():
    th = compute_thresholds(200_000, 64_000, env={})
    assert th.effective == 180_000
    assert th.autocompact == 167_000
    assert th.warning == 147_000
    assert th.blocking == 177_000


def test_reserve_is_min_of_max_output_and_20000():
    th = compute_thresholds(200_000, 16_384, env={})
    assert th.effective == 183_616
    assert th.autocompact == 170_616


def test_million_window_keeps_unscaled_buffers():
    th = compute_thresholds(1_000_000, 64_000, env={})
    assert th.autocompact == 1_000_000 - 20_000 - 13_000


def test_a_30000_token_window_scales_its_buffers():
    th = compute_thresholds(30_000, 8_192, env={})
    assert (th.effective, th.autocompact, th.warning, th.blocking) == (21_808, 19_858, 16_858, 21_358)


WINDOWS = [1_000, 4_096, 20_000, 30_000, 100_000, 199_999, 200_000, 1_000_000]
OUTPUTS = [256, 4_096, 8_192, 32_000, 64_000]


@pytest.mark.parametrize(
    ("window", "max_output"), [(w, o) for w in WINDOWS for o in OUTPUTS if o < w]
)
def test_scaled_thresholds_keep_their_order(window, max_output):
    th = compute_thresholds(window, max_output, env={})
    assert 0 < th.warning < th.autocompact < th.blocking < th.effective <= window


def test_window_smaller_than_output_is_a_clear_error():
    with pytest.raises(ValueError, match="leaves no room"):
        compute_thresholds(1_000, 2_000, env={})


def test_env_percent_override_lowers_trigger():
    th = compute_thresholds(200_000, 64_000, env={"CTX_MAGIC_AUTOCOMPACT_PCT": "50"})
    assert th.autocompact == 90_000
    assert th.warning == 70_000


def test_override_never_above_default():
    th = compute_thresholds(200_000, 64_000, env={"CTX_MAGIC_AUTOCOMPACT_PCT": "99"})
    assert th.autocompact == 167_000


def test_config_percent_wins_over_env():
    th = compute_thresholds(200_000, 64_000, autocompact_pct=25, env={"CTX_MAGIC_AUTOCOMPACT_PCT": "50"})
    assert th.autocompact == 45_000


@pytest.mark.parametrize("raw", ["", "abc", "0", "-5", "150"])
def test_bad_autocompact_env_values_are_ignored(raw):
    th = compute_thresholds(200_000, 64_000, env={"CTX_MAGIC_AUTOCOMPACT_PCT": raw})
    assert th.autocompact == 167_000


def test_threshold_zones_and_percent_left():
    th = compute_thresholds(200_000, 64_000, env={})
    assert th.zone(0) == "ok"
    assert th.zone(147_000) == "warning"
    assert th.zone(167_000) == "compacting"
    assert th.zone(177_000) == "blocked"
    assert th.percent_left(0) == 100.0
    assert th.percent_left(83_500) == 50.0
    assert th.percent_left(200_000) == 0.0
