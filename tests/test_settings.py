"""One settings source (ctx_magic/settings.py): defaults as named constants, bounds said in one
line, the window and reply cap resolved once, and the traitlets config built from it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from traitlets import TraitError

from ctx_magic.notebook.config import CtxMagic
from ctx_magic.settings import (
    CLEAR_AT_LEAST,
    KEEP_RECENT,
    MIN_CONTEXT_WINDOW,
    ModelLimits,
    Settings,
    setting_problem,
)

PACKAGE = Path(__file__).resolve().parents[1] / "ctx_magic"


def test_the_seeds_numbers_are_the_defaults():
    assert (KEEP_RECENT, CLEAR_AT_LEAST) == (5, 20_000)
    assert Settings().keep_recent == KEEP_RECENT and Settings().snip_max_messages == 200


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


@pytest.mark.parametrize(("name", "value", "line"), [
    ("context_window", 5, f"context_window must be at least {MIN_CONTEXT_WINDOW:,} (or 0: ask the Models API); got 5"),
    ("keep_recent", 0, "keep_recent must be at least 1; got 0"),
    ("autocompact_pct", 150.0, "autocompact_pct must be between 1 and 100 (or 0: the default threshold); got 150.0"),
    ("cache_ttl", "2h", "cache_ttl must be one of '5m', '1h', got '2h'"),
])
def test_a_value_out_of_bounds_is_one_clear_line(name, value, line):
    assert setting_problem(name, value) == line
    with pytest.raises(TraitError, match=name) as refused:  # traitlets words the choices itself
        setattr(CtxMagic(), name, value)
    assert "\n" not in str(refused.value)


def test_zero_keeps_its_meaning_where_a_setting_gives_it_one():
    assert setting_problem("context_window", 0) is None and setting_problem("clear_at_least", 0) is None


def test_every_setting_is_a_trait_with_its_default_and_help():
    config = CtxMagic()
    for spec in dataclasses.fields(Settings):
        trait = config.traits()[spec.name]
        assert trait.default_value == spec.default, spec.name
        assert trait.help, spec.name
    assert config.to_settings() == Settings()
    config.keep_recent = 3
    assert config.to_settings() == Settings(keep_recent=3)


def test_the_readme_table_lists_every_setting_with_its_default():
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    for spec in dataclasses.fields(Settings):
        assert f"| `{spec.name}` | `{spec.default!r}` |" in readme, spec.name


@pytest.mark.parametrize(("name", "value"), [("thinking", "sometimes"), ("provider", "azure"), ("strategy", "both")])
def test_the_new_choices_are_checked_at_config_time(name, value):
    assert f"{name} must be one of" in setting_problem(name, value)
    with pytest.raises(TraitError):
        setattr(CtxMagic(), name, value)
