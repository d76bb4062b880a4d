"""The per-model benchmark (benchmarks/thinking_models.py) and the soak's `--models`: the session
is the one the targets describe, and a short soak on another model with the prefix check is
never refused and drops no thinking."""

from __future__ import annotations

import pytest

from benchmarks.soak import models_arg, soak
from benchmarks.thinking_models import SESSION_TURNS, session, session_plan
from ctx_magic.offline.thinking import PRESERVED_THINKING_MODELS


def test_the_session_holds_thirty_turns_memory_a_pin_a_break_and_a_compaction():
    kinds = [kind for kind, _ in session_plan()]
    sources = "\n".join(source for _, source in session_plan())
    assert kinds.count("turn") == SESSION_TURNS == 30 and kinds.count("idle") == 1
    assert all(word in sources for word in ("%memory add", "%pin", "%compact", "```python"))
    assert kinds.index("idle") < next(n for n, (_, s) in enumerate(session_plan()) if s == "%compact")


def test_models_names_every_model_with_preserved_thinking_or_the_ones_given():
    assert models_arg("preserved-thinking") == list(PRESERVED_THINKING_MODELS)
    assert models_arg("claude-opus-5-5,claude-haiku-5-5") == ["claude-opus-5-5", "claude-haiku-5-5"]


def test_a_short_soak_on_another_model_with_the_check_is_never_refused(tmp_path):
    report = soak(12_000, seed=13, steps=14, rate=0.3, folder=tmp_path, model="claude-mythos-5-2")
    assert report.model == "claude-mythos-5-2" and report.requests > 0
    assert (report.refused_thinking, report.thinking_dropped, report.violations, report.dead_ends) == (0, 0, 0, 0)
    assert report.final_ok


@pytest.mark.slow
def test_the_session_on_the_default_model_is_never_refused_and_says_each_thinking_clearing():
    result = session("claude-sonnet-5-5")
    r = result.report
    assert result.models == {"claude-sonnet-5-5"}
    assert r.requests > SESSION_TURNS and not r.failed
    assert (r.refused_thinking, r.thinking_dropped, r.dead_ends, r.tracebacks) == (0, 0, 0, 0)
    assert result.said > 0 and r.final_ok
