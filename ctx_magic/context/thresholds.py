"""Windows and thresholds, scaled to the window: when to warn, when to compact, when to refuse."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# p99.99 of observed compaction summaries is 17,387 tokens; 20,000 keeps room for the summary.
MAX_OUTPUT_TOKENS_FOR_SUMMARY = 20_000
# Checked before each call: one more response can land between checks, so compact early.
AUTOCOMPACT_BUFFER_TOKENS = 13_000
# Room to warn the user before the automatic trigger fires.
WARNING_THRESHOLD_BUFFER_TOKENS = 20_000
# Past this, a manual compaction still fits; new requests are refused.
BLOCKING_BUFFER_TOKENS = 3_000
# The buffers above were tuned for 200,000-token windows; smaller windows scale them.
REFERENCE_WINDOW = 200_000
DEFAULT_WINDOW = 200_000
ENV_AUTOCOMPACT_PCT = "CTX_MAGIC_AUTOCOMPACT_PCT"


@dataclass(frozen=True)
class Thresholds:
    """Every limit derived from one model's window and output cap."""

    window: int
    max_output: int
    effective: int
    autocompact: int
    warning: int
    blocking: int

    @property
    def scale(self) -> float:
        return min(1.0, self.window / REFERENCE_WINDOW)

    def zone(self, tokens: int) -> str:
        if tokens >= self.blocking:
            return "blocked"
        if tokens >= self.autocompact:
            return "compacting"
        if tokens >= self.warning:
            return "warning"
        return "ok"

    def percent_left(self, tokens: int) -> float:
        """Room left before auto-compaction, as a percentage of the threshold."""
        return max(0.0, round(100.0 * (self.autocompact - tokens) / self.autocompact, 1))


def compute_thresholds(
    window: int,
    max_output: int,
    *,
    autocompact_pct: float | None = None,
    env: Mapping[str, str] | None = None,
    thinking_budget: int = 0,
) -> Thresholds:
    """The window's thresholds, with proportional buffers below a 200,000-token window.

    `autocompact_pct` (config) or the CTX_MAGIC_AUTOCOMPACT_PCT variable sets the trigger as a
    percentage of the effective window, never later than the default trigger. A thinking budget
    is reserved on top of the reply (Claude Code: thinking tokens are counted with their own budget):
    the next reply, and the summary call that shares the main call's thinking settings, may
    think that much before they answer.
    """
    if window <= 0:
        raise ValueError(f"context window must be positive, got {window}")
    scale = min(1.0, window / REFERENCE_WINDOW)
    effective = window - min(max_output, MAX_OUTPUT_TOKENS_FOR_SUMMARY) - thinking_budget
    if effective <= 0:
        thinking = f" with {thinking_budget} thinking tokens" if thinking_budget else ""
        raise ValueError(f"max output {max_output}{thinking} leaves no room in a {window}-token window")
    autocompact = effective - round(AUTOCOMPACT_BUFFER_TOKENS * scale)
    blocking = effective - round(BLOCKING_BUFFER_TOKENS * scale)
    pct = autocompact_pct if autocompact_pct else _env_pct(os.environ if env is None else env)
    if pct:
        autocompact = min(autocompact, max(1, int(effective * pct / 100)))
    warning = max(1, autocompact - round(WARNING_THRESHOLD_BUFFER_TOKENS * scale))
    autocompact = max(warning + 1, autocompact)
    return Thresholds(window, max_output, effective, autocompact, warning, blocking)


def _env_pct(env: Mapping[str, str]) -> float | None:
    raw = env.get(ENV_AUTOCOMPACT_PCT, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 < value <= 100 else None
