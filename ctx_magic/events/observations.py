"""Observations: what a call measured, spent and broke, recorded for the panel and the benchmarks
(not needed to rebuild the context)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ctx_magic.events.base import Event
from ctx_magic.figures import ContextFigures
from ctx_magic.messages import Usage


@dataclass(frozen=True)
class ContextMeasured(Event):
    """The engine's view of the context before a call."""

    name: ClassVar[str] = "measured"
    figures: ContextFigures


@dataclass(frozen=True)
class UsageUpdated(Event):
    """One response's usage, and the session's totals after it (for the spend figures)."""

    name: ClassVar[str] = "usage"
    usage: Usage
    estimated_prompt_tokens: int
    correction: float
    totals: Mapping[str, Any] = field(default_factory=dict)
    cache_hit_ratio: float = 0.0
    cost_usd: float = 0.0
    """What this response cost (with the server's compaction iterations), at the model's prices."""


@dataclass(frozen=True)
class CacheBroke(Event):
    """The prompt cache read fell sharply against the previous response (the prefix was lost)."""

    name: ClassVar[str] = "cache_break"
    previous_read: int
    cache_read: int
    cache_written: int
    expected: bool  # explained (expiry after an idle gap, a new system prompt or tool list), not a surprise
    reason: str

    def summary(self) -> dict[str, Any]:
        """What the status JSON and the panel show of it."""
        return {"previous_read": self.previous_read, "cache_read": self.cache_read, "reason": self.reason,
                "expected": self.expected}


@dataclass(frozen=True)
class CompactionFailedEvent(Event):
    name: ClassVar[str] = "compaction_failed"
    trigger: str
    reason: str
    consecutive_failures: int
    breaker_open: bool


@dataclass(frozen=True)
class BreakerReset(Event):
    name: ClassVar[str] = "breaker_reset"
    reason: str
