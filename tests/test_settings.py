"""The settings: each declared once, as a field of `Settings` with its default, help and bounds;
a trait of `CtxMagic` made of each, refused in one line by traitlets when out of bounds; a new
`Settings` whenever one changes, the value every part reads; the window and reply cap resolved once."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from traitlets import Float, TraitError

from benchmarks.house import settings_places
from ctx_magic.notebook.config import CtxMagic
from ctx_magic.settings import MIN_CONTEXT_WINDOW, ModelLimits, Settings

PACKAGE = Path(__file__).resolve().parents[1] / "ctx_magic"


@pytest.mark.parametrize("constant", ["CLEAR_AT_LEAST", "MIN_CONTEXT_WINDOW", "MAX_RETRIES_LIMIT",
                                      "MAX_CONSECUTIVE_FAILURES"])
def test_each_named_limit_is_defined_in_exactly_one_place(constant):
    definitions = [path for path in PACKAGE.rglob("*.py") if "offline" not in path.parts  # the stand-in's are the API's
                   and re.search(rf"^{constant} = ", path.read_text(encoding="utf-8"), re.MULTILINE)]
    assert len(definitions) == 1, definitions


def test_each_setting_is_written_once_as_its_field_and_every_field_is_read():
    places, unread = settings_places(PACKAGE)
    assert (places["constant"], places["trait"], places["field"]) == (0, 0, len(dataclasses.fields(Settings)))
    assert unread == []


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
    ("thinking", "sometimes", "expected any of ['auto', 'off', 'enabled', 'adaptive']"),
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
    setattr(config, name, 7 if name == "autocompact_pct" else 5_000)
    setattr(config, name, 0)
    assert getattr(config.current, name) == 0


def test_every_setting_is_a_trait_with_its_default_and_help():
    traits = CtxMagic().traits(config=True)
    assert sorted(traits) == sorted(f.name for f in dataclasses.fields(Settings))
    for spec in dataclasses.fields(Settings):
        assert traits[spec.name].default_value == spec.default, spec.name
        assert traits[spec.name].help, spec.name


def test_a_change_of_a_trait_makes_a_new_frozen_settings_value():
    config = CtxMagic()
    before = config.current
    assert before == Settings()
    config.keep_recent = 3
    assert config.current == Settings(keep_recent=3)
    assert before == Settings()  # the value a part already holds stays what it was
    with pytest.raises(TraitError):
        config.keep_recent = 0
    assert config.current == Settings(keep_recent=3)


def test_the_readme_table_lists_every_setting_with_its_default():
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    for spec in dataclasses.fields(Settings):
        assert f"| `{spec.name}` | `{spec.default!r}` |" in readme, spec.name
