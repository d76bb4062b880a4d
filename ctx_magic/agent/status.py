"""The session's status as one typed value: the cell's Done line, `%ctx status` (text and
JSON) and the context panel all render a `StatusSnapshot`, and nothing else."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ctx_magic.agent.usage import UsageTotals
from ctx_magic.context.compaction_state import MAX_CONSECUTIVE_FAILURES, Boundary
from ctx_magic.events import Composition, ContextFigures


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

    @property
    def composition(self) -> Composition:
        """What the next request carries, part by part (the panel's composition bar)."""
        return self.context.composition or Composition(window=self.context.window)

    @property
    def breaker_open(self) -> bool:
        return self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES

    @property
    def tokens(self) -> int:
        return self.context.tokens

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
        }
