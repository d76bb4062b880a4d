"""The one place that decides what happens to the context before a model call.

`decide(situation)` looks at the count, the thresholds, the idle gap, what clearing would
free, the circuit breaker and what compaction can use, and returns a `Plan` with its reason:
clear old results (idle or under pressure), compact (from the session's notes first, else with
a summary), ask the API for the exact count first, or refuse because the context is blocked.
The engine carries out the clearing, the loop carries out the compaction, the panel shows the
reason. L1 (persist) and L2 (snip) are fixed rules applied before it (engine.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ctx_magic.context.thresholds import Thresholds
from ctx_magic.prices import Prices

COMPACT_FROM_NOTES = "notes"
COMPACT_WITH_SUMMARY = "summary"
NOTHING = "nothing to do"


@dataclass(frozen=True)
class Situation:
    """What the decision looks at, measured by the engine just before a model call."""

    tokens: int
    """The live context's size: the API's last count plus an estimate of what came after."""
    estimated_tokens: int
    """How much of `tokens` is a local estimate (0: the API's own count)."""
    thresholds: Thresholds
    idle_seconds: float | None
    """Seconds since the model last answered (None before its first answer)."""
    idle_limit_seconds: float
    """An idle gap longer than this means the prompt cache has expired (SPEC L3a)."""
    clearable_tokens: int = 0
    """What clearing every old compactable result would free."""
    clear_at_least: int = 0
    """A pressure clearing must free this much to be worth the cache break (L3b)."""
    may_clear: bool = True
    """False once the clearing step has run (a second decision only concerns compaction)."""
    auto_compaction: bool = True
    """False inside a side call (SPEC L4's recursion guard) or when auto-compaction is off."""
    breaker_open: bool = False
    """Auto-compaction failed too many times in a row (L6)."""
    notes_ready: bool = False
    """The session keeps notes that a compaction could use instead of a summary call (S3)."""
    prices: Prices | None = None
    """The model's prices, USD per million tokens (input, 5m / 1h cache writes, cache reads,
    output, and the long-prompt rates of the models that have them): what carrying `tokens`
    costs on each call against what a summary costs, for windows far larger than a summary."""

    @property
    def idle(self) -> bool:
        return self.idle_seconds is not None and self.idle_seconds > self.idle_limit_seconds

    def with_exact_count(self, tokens: int) -> Situation:
        """The same situation after the API counted the context itself (T3)."""
        return dataclasses.replace(self, tokens=tokens, estimated_tokens=0, may_clear=False)


@dataclass(frozen=True)
class Plan:
    """What happens before the next call, and why."""

    clear: str | None = None
    """'idle' or 'pressure' when old tool results are cleared first."""
    compact: tuple[str, ...] = ()
    """Compaction methods to try, in order ('notes', then 'summary'); empty: no compaction."""
    check_exact: bool = False
    """Ask the API's count before compacting: the estimate may be over while the truth is not."""
    tokens_after: int = 0
    """The expected size once the clearing is done."""
    zone: str = "ok"
    """The zone of `tokens_after`: 'blocked' means the call must not be sent unless compacted."""
    why_clear: str = ""
    why_compact: str = ""

    @property
    def reason(self) -> str:
        return "; ".join(r for r in (self.why_clear, self.why_compact) if r) or NOTHING

    def after(self, clearing: Plan) -> Plan:
        """This plan, decided once `clearing`'s clearing was done, with that clearing in it."""
        return dataclasses.replace(self, clear=clearing.clear, why_clear=clearing.why_clear)


def _clearing(s: Situation) -> tuple[str | None, str]:
    if not s.may_clear or s.clearable_tokens <= 0:
        return None, ""
    if s.idle:
        return "idle", f"idle {s.idle_seconds / 60:.0f} min: the prompt cache has expired, so clearing costs nothing"
    th = s.thresholds
    if s.tokens < th.warning or s.clearable_tokens < s.clear_at_least:
        return None, ""
    if s.auto_compaction and not s.breaker_open and s.tokens - s.clearable_tokens >= th.autocompact:
        # The compaction happens anyway; clearing first would only break the prefix its
        # summary call could read from the cache.
        return None, ""
    return "pressure", (f"over the warning level ({s.tokens:,} >= {th.warning:,}) and clearing frees "
                        f"{s.clearable_tokens:,} tokens")


def decide(s: Situation) -> Plan:
    """The plan for the next call (pure: the same situation always gives the same plan)."""
    th = s.thresholds
    clear, why_clear = _clearing(s)
    tokens = s.tokens - (s.clearable_tokens if clear else 0)
    zone = th.zone(tokens)
    reasons: list[str] = []
    compact: tuple[str, ...] = ()
    check_exact = False
    if tokens >= th.autocompact:
        if not s.auto_compaction:
            reasons.append("at the compaction threshold, but auto-compaction cannot run here")
        elif s.breaker_open:
            reasons.append("at the compaction threshold, but auto-compaction is off after repeated failures")
        else:
            compact = (COMPACT_FROM_NOTES, COMPACT_WITH_SUMMARY) if s.notes_ready else (COMPACT_WITH_SUMMARY,)
            check_exact = s.estimated_tokens > 0
            reasons.append(f"{tokens:,} tokens reach the compaction threshold {th.autocompact:,}"
                           + (" (by estimate; the API counts first)" if check_exact else ""))
    if zone == "blocked" and not compact:
        reasons.append(f"past the blocking limit {th.blocking:,} with no compaction possible")
    return Plan(clear, compact, check_exact, tokens, zone, why_clear, "; ".join(reasons))
