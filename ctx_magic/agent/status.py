"""The session's status as one typed value: the cell's Done line, `%ctx status` (text and
JSON) and the context panel all render a `StatusSnapshot`, and nothing else."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ctx_magic.agent.usage import UsageTotals
from ctx_magic.context.compaction_state import MAX_CONSECUTIVE_FAILURES, Boundary
from ctx_magic.figures import Composition, ContextFigures
from ctx_magic.prices import UNKNOWN_PRICES, Prices


@dataclass(frozen=True)
class StatusSnapshot:
    session_id: str
    model: str
    backend: str
    window_source: str
    """Where the window came from: config, models-api or table."""
    max_output: int
    """The reply cap in force."""
    context: ContextFigures
    boundaries: tuple[Boundary, ...]
    consecutive_failures: int
    turns: int
    usage: UsageTotals
    cache_breaks: tuple[dict[str, Any], ...]
    transcript: str
    thinking: str = "off"
    """The thinking type sent (off, enabled, adaptive)."""
    thinking_budget: int = 0
    prices: Prices = UNKNOWN_PRICES
    """The prices in force, USD per million tokens (source: table, config or unknown)."""
    provider: str = "anthropic"
    strategy: str = "client"
    token_counter: str = ""
    """What counts text where no usage has measured it (Claude's tokenizer, or o200k scaled)."""

    def cost_json(self) -> dict[str, Any]:
        """The dollar figures: spent, saved by each kind of change, and the rates used."""
        saved = self.usage.saved_usd
        return {"session_usd": round(self.usage.cost_usd, 6), "saved_usd": round(sum(saved.values()), 6),
                "saved_by": {k: round(v, 6) for k, v in sorted(saved.items())},
                "prices_per_mtok": self.prices.figures(), "prices_source": self.prices.source}

    @property
    def composition(self) -> Composition:
        """What the next request carries, part by part (the panel's composition bar)."""
        return self.context.composition or Composition(window=self.context.window)

    @property
    def breaker_open(self) -> bool:
        return self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES

    def to_json(self) -> dict[str, Any]:
        """The status as `%ctx status --json` prints it."""
        c = self.context
        return {
            "session_id": self.session_id, "model": self.model, "backend": self.backend,
            "window": c.window, "window_source": self.window_source, "max_output": self.max_output,
            "threshold": c.threshold, "warning": c.warning, "blocking": c.blocking, "tokens": c.tokens,
            "zone": c.zone, "percent_left": c.percent_left, "messages": c.messages,
            "tool_results": {"live": c.live_results, "cleared": c.cleared_results, "persisted": c.persisted_results},
            "plan": c.plan, "composition": self.composition.to_json(),
            "boundaries": [b.figures() for b in self.boundaries],
            "breaker_open": self.breaker_open, "consecutive_failures": self.consecutive_failures,
            "turns": self.turns,
            "usage": {**dataclasses.asdict(self.usage), "cache_hit_ratio": round(self.usage.cache_hit_ratio, 4)},
            "cache_breaks": list(self.cache_breaks),
            "transcript": self.transcript,
            "thinking": {"type": self.thinking, "budget_tokens": self.thinking_budget},
            "provider": self.provider, "strategy": self.strategy, "token_counter": self.token_counter,
            "cost": self.cost_json(),
        }
