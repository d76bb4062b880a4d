"""The settings: each declared once as a trait of `CtxMagic` with its help and bounds, refused in
one line by traitlets when out of bounds, made into the one frozen `Settings` the engine and the
loop read; defaults as named constants; the window and reply cap resolved once."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from traitlets import Float, TraitError

from ctx_magic.notebook.config import CtxMagic
from ctx_magic.settings import MIN_CONTEXT_WINDOW, ModelLimits, Settings

PACKAGE = Path(__file__).resolve().parents[1] / "ctx_magic"


@pytest.mark.parametrize("constant", ["KEEP_RECENT", "CLEAR_AT_LEAST", "SNIP_MAX_MESSAGES", "DEFAULT_MAX_OUTPUT",
                                      "MEMORY_BUDGET_TOKENS", "IMAGE_MAX_BYTES", "MAX_RETRIES",
                                      "MAX_CONSECUTIVE_FAILURES"])
def test_each_default_is_defined_in_exactly_one_place(constant):
    definitions = [path for path in PACKAGE.rglob("*.py") if "offline" not in path.parts  # the stand-in's are the API's
                   and re.search(rf"^{constant} = ", path.read_text(encoding="utf-8"), re.MULTILINE)]
    assert len(definitions) == 1, definitions


def test_the_breaker_limit_is_one_named_constant_not_a_literal():
    literal = re.compile(r"(failures\s*>=\s*3|after 3 failures)")
    offenders = [p for p in PACKAGE.rglob("*.py") if literal.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_window_resolves_once_from_the_setting_or_the_model():
    limits = ModelLimits(200_000, 64_000, "models-api")
    assert Settings().resolve(limits) == Settings().resolve(limits)
    window = Settings().resolve(limits)
    assert (window.tokens, window.reply_cap, window.source) == (200_000, 16_384, "models-api")
    small = Settings(context_window=12_000).resolve(limits)
    assert (small.tokens, small.reply_cap, small.source) == (12_000, 3_000, "config")


@pytest.mark.parametrize(("name", "value", "words"), [
    ("context_window", 5, f"should not be less than {MIN_CONTEXT_WINDOW}, but a value of 5 was specified (or 0: ask "
                          "the Models API)"),
    ("keep_recent", 0, "should not be less than 1, but a value of 0 was specified"),
    ("autocompact_pct", 150.0, "should not be greater than 100, but a value of 150.0 was specified (or 0: the "
                               "default threshold)"),
    ("idle_minutes", -1.0, "should not be less than 0.01, but a value of -1.0 was specified (or 0: the cache TTL)"),
    ("idle_minutes", float("nan"), "should be a finite number, but a value of nan was specified (or 0: the cache TTL)"),
    ("idle_minutes", float("inf"), "should be a finite number, but a value of inf was specified (or 0: the cache TTL)"),
    ("stall_seconds", float("nan"), "should be a finite number, but a value of nan was specified"),
    ("stall_seconds", float("inf"), "should be a finite number, but a value of inf was specified"),
    ("autocompact_pct", float("nan"), "should be a finite number, but a value of nan was specified"),
    ("max_retries", 11, "should not be greater than 10, but a value of 11 was specified"),
    ("cache_ttl", "2h", "expected any of ['5m', '1h'] (case-insensitive), not the str '2h'"),
    ("thinking", "sometimes", "expected any of ['off', 'enabled', 'adaptive']"),
    ("provider", "azure", "expected any of ['anthropic', 'bedrock', 'vertex']"),
    ("strategy", "both", "expected any of ['client', 'server']"),
    ("prices", "cheap please", "prices: expected name=value"),
    ("team", "../etc", "team: a team name is letters, digits, '.', '_' and '-'"),
])
def test_a_value_out_of_bounds_is_refused_in_one_line_naming_the_setting(name, value, words):
    config = CtxMagic()
    with pytest.raises(TraitError) as refused:
        setattr(config, name, value)
    assert name in str(refused.value)
    assert words in str(refused.value)
    assert "\n" not in str(refused.value)
    assert getattr(config, name) == getattr(Settings(), name)


def test_every_float_setting_refuses_nan_and_infinity():
    floats = {name for name, trait in CtxMagic().traits(config=True).items() if isinstance(trait, Float)}
    assert floats == {"autocompact_pct", "idle_minutes", "stall_seconds"}
    for name in sorted(floats):
        for value in (float("nan"), float("inf")):
            config = CtxMagic()
            with pytest.raises(TraitError, match=f"{name}.* trait"):
                setattr(config, name, value)
            assert getattr(config, name) == getattr(Settings(), name)


@pytest.mark.parametrize("name", ["context_window", "clear_at_least", "autocompact_pct", "idle_minutes"])
def test_zero_keeps_its_meaning_where_a_setting_gives_it_one(name):
    config = CtxMagic()
    setattr(config, name, 0)
    assert getattr(config.to_settings(), name) == 0


def test_every_setting_is_a_trait_with_its_default_and_help():
    traits = CtxMagic().traits(config=True)
    assert sorted(traits) == sorted(f.name for f in dataclasses.fields(Settings))
    for spec in dataclasses.fields(Settings):
        assert traits[spec.name].default_value == spec.default, spec.name
        assert traits[spec.name].help, spec.name


def test_the_config_makes_the_one_frozen_settings_value():
    config = CtxMagic()
    assert config.to_settings() == Settings()
    config.keep_recent = 3
    assert config.to_settings() == Settings(keep_recent=3)


def test_the_readme_table_lists_every_setting_with_its_default():
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    for spec in dataclasses.fields(Settings):
        assert f"| `{spec.name}` | `{spec.default!r}` |" in readme, spec.name
