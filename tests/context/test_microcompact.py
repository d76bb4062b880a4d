"""Microcompact: its keep-recent rule, idle and pressure triggers, protected tools."""

from __future__ import annotations

from builders import exchange

from ctx_magic.context.decide import SessionFacts
from ctx_magic.context.engine import ContextSettings, prepare
from ctx_magic.context.microcompact import CLEARED_TEXT, COMPACTABLE_TOOLS, idle_gap
from ctx_magic.context.state import ContextState
from ctx_magic.context.thresholds import compute_thresholds
from ctx_magic.events import Cleared
from ctx_magic.messages import Usage, result_text, user_text
from ctx_magic.settings import Settings

MINUTE = 60.0


def session(outputs, tool="python", usage=None):
    msgs = [user_text("task", timestamp=0.0)]
    for n, out in enumerate(outputs):
        msgs += exchange(tool, out, t=float(n), usage=usage)
    return msgs


def results_of(msgs):
    return [result_text(b) for m in msgs for b in m.blocks("tool_result")]


def settings(**kw):
    return ContextSettings(thresholds=compute_thresholds(200_000, 32_000, env={}), **kw)


def test_the_idle_gap_is_the_cache_lifetime_unless_set():
    assert ContextSettings.create(200_000, 32_000, Settings(cache_ttl="5m")).idle_seconds == 5 * 60
    assert ContextSettings.create(200_000, 32_000, Settings(cache_ttl="1h")).idle_seconds == 60 * 60
    assert ContextSettings.create(200_000, 32_000, Settings(idle_minutes=7.0)).idle_seconds == 7 * 60


def outputs(count: int) -> list[str]:
    return [f"output {n}: " + "some values " * 20 for n in range(count)]


def test_idle_gap_over_ttl_clears_all_but_five_most_recent():
    msgs = session(outputs(8))
    last = msgs[-2].timestamp
    out = prepare(msgs, ContextState(), last + 5 * MINUTE + 1, settings())
    texts = results_of(out.messages)
    assert texts[:3] == [CLEARED_TEXT] * 3
    assert texts[3:] == outputs(8)[3:]
    (event,) = [e for e in out.events if isinstance(e, Cleared)]
    assert event.trigger == "idle" and len(event.replacements) == 3


def test_no_clearing_within_the_ttl():
    msgs = session(outputs(8))
    out = prepare(msgs, ContextState(), msgs[-2].timestamp + 5 * MINUTE, settings())
    assert results_of(out.messages) == outputs(8)


def test_results_smaller_than_the_stub_stay():
    """Clearing "42" would put a longer stub in its place: the live count must never grow."""
    msgs = session(["42"] * 8)
    out = prepare(msgs, ContextState(), 3_600, settings())
    assert results_of(out.messages) == ["42"] * 8


def test_one_hour_cache_waits_an_hour():
    msgs = session(outputs(8))
    hour = ContextSettings.create(200_000, 32_000, Settings(cache_ttl="1h"), env={})
    assert not [e for e in prepare(msgs, ContextState(), 30 * MINUTE, hour).events if isinstance(e, Cleared)]
    assert [e for e in prepare(msgs, ContextState(), 61 * MINUTE + 10, hour).events if isinstance(e, Cleared)]


def test_microcompact_keep_recent_is_configurable():
    msgs = session(outputs(8))
    out = prepare(msgs, ContextState(), 3_600, settings(keep_recent=2))
    assert results_of(out.messages).count(CLEARED_TEXT) == 6


def test_protected_tools_are_never_cleared():
    assert "memory" not in COMPACTABLE_TOOLS and "ask_user" not in COMPACTABLE_TOOLS
    msgs = session([f"remembered {n}" for n in range(8)], tool="memory")
    out = prepare(msgs, ContextState(), 3_600, settings())
    assert CLEARED_TEXT not in results_of(out.messages)


# A long session in which nothing but clearing can lighten the calls: a pressure clearing pays
# back there (context/decide.py prices it; tests/context/test_decide.py covers when it does not).
LONG_WITHOUT_COMPACTION = SessionFacts(calls=150, growth=2_000, breaker_open=True)


def test_pressure_clears_when_above_warning_and_enough_is_freed():
    big = "word " * 6_000  # about 6,000 tokens each
    msgs = session([big] * 10, usage=Usage(150_000, 100))  # anchor says 150,100 > warning
    out = prepare(msgs, ContextState(), 1.0, settings(), facts=LONG_WITHOUT_COMPACTION)
    (event,) = [e for e in out.events if isinstance(e, Cleared)]
    assert event.trigger == "pressure" and len(event.replacements) == 5
    assert event.tokens_freed >= 20_000


def test_pressure_does_not_fire_for_too_little():
    msgs = session(["small output"] * 10, usage=Usage(150_000, 100))
    out = prepare(msgs, ContextState(), 1.0, settings(), facts=LONG_WITHOUT_COMPACTION)
    assert not [e for e in out.events if isinstance(e, Cleared)]


def test_pressure_needs_the_warning_level():
    big = "word " * 6_000
    msgs = session([big] * 10, usage=Usage(1_000, 100))
    out = prepare(msgs, ContextState(), 1.0, settings(), facts=LONG_WITHOUT_COMPACTION)
    assert not [e for e in out.events if isinstance(e, Cleared)]


def test_cleared_result_names_its_persisted_file():
    msgs = session(["p" * 60_000] + outputs(6))
    out = prepare(msgs, ContextState(), 3_600, settings())
    first = results_of(out.messages)[0]
    assert first.startswith(CLEARED_TEXT) and "tool-results/" in first


def test_idle_gap_measures_from_last_assistant_answer():
    msgs = session(["a", "b"])
    assert idle_gap(msgs, 100.0) == 100.0 - msgs[-2].timestamp
    assert idle_gap([user_text("x")], 10.0) is None


def test_freed_tokens_before_anchor_lower_the_count():
    big = "word " * 6_000
    msgs = session([big] * 10, usage=Usage(150_000, 100))
    before = prepare(msgs, ContextState(), 1.0, settings(clear_at_least=10**9), facts=LONG_WITHOUT_COMPACTION)
    after = prepare(msgs, ContextState(), 1.0, settings(), facts=LONG_WITHOUT_COMPACTION)
    assert after.count.tokens < before.count.tokens - 20_000


def test_pressure_clearing_that_cannot_avoid_compaction_is_skipped():
    """Beyond Claude Code: the compaction comes anyway; clearing first would only break the
    cached prefix its summary call reads (benchmarks/cache.py)."""
    big = "word " * 6_000
    msgs = session([big] * 10, usage=Usage(190_000, 100))  # over the threshold even after clearing
    out = prepare(msgs, ContextState(), 1.0, settings())
    assert not [e for e in out.events if isinstance(e, Cleared)] and out.plan.compact
    breaker_open = prepare(msgs, ContextState(), 1.0, settings(), facts=LONG_WITHOUT_COMPACTION)
    assert [e.trigger for e in breaker_open.events if isinstance(e, Cleared)] == ["pressure"]


def test_clear_at_least_default_scales_with_a_small_window_but_a_set_value_is_kept():
    small = compute_thresholds(30_000, 8_192, env={})
    assert ContextSettings(thresholds=small).clear_threshold == round(20_000 * small.scale) == 3_000
    assert ContextSettings(thresholds=small, clear_at_least=5_000).clear_threshold == 5_000
    full = compute_thresholds(200_000, 32_000, env={})
    assert ContextSettings(thresholds=full).clear_threshold == 20_000
