"""What a session spends, and whether its prompt cache holds (SPEC C10's detector).

Main calls and side calls (summaries, notes, memories) all add to the totals, from any
thread; only main-loop responses are compared with the previous one for cache breaks.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.context.cache_break import CacheBaseline, observe
from ctx_magic.events import CacheBroke
from ctx_magic.messages import Usage


@dataclass
class UsageTotals:
    calls: int = 0
    main_calls: int = 0
    """Calls of the conversation itself (the others are side calls: summaries, notes, memories)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def add(self, usage: Usage) -> None:
        self.calls += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_creation_input_tokens += usage.cache_creation_input_tokens
        self.cache_read_input_tokens += usage.cache_read_input_tokens

    @property
    def cache_hit_ratio(self) -> float:
        prompt = self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
        return self.cache_read_input_tokens / prompt if prompt else 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


GROWTH_WINDOW = 8  # the recent calls whose growth predicts the next ones


class UsageMeter:
    """The session's usage totals and the cache-break watch over its main calls."""

    def __init__(self, totals: Mapping[str, int] | None = None) -> None:
        self.totals = UsageTotals(**(totals or {}))
        self.breaks: list[CacheBroke] = []
        self._baseline = CacheBaseline()
        self._lock = threading.Lock()
        self._last_prompt: int | None = None
        self._growths: deque[int] = deque(maxlen=GROWTH_WINDOW)

    def add(self, usage: Usage) -> None:
        """One response's usage (side calls run in other threads)."""
        with self._lock:
            self.totals.add(usage)

    def main_call(self, prompt_tokens: int) -> None:
        """A call of the conversation went out with this many prompt tokens."""
        with self._lock:
            self.totals.main_calls += 1
        if self._last_prompt is not None and prompt_tokens > self._last_prompt:
            self._growths.append(prompt_tokens - self._last_prompt)  # a compaction's drop says nothing
        self._last_prompt = prompt_tokens

    def growth(self) -> int:
        """Tokens a call has been adding to the context lately (0 before two calls)."""
        return int(statistics.median(self._growths)) if self._growths else 0

    def snapshot(self) -> UsageTotals:
        with self._lock:
            return dataclasses.replace(self.totals)

    def observe(self, usage: Usage, now: float, *, ttl_seconds: float, signature: str) -> CacheBroke | None:
        """Compare a main-loop response's cache read with the previous one; the break, if any."""
        self._baseline, broke = observe(self._baseline, usage, now, ttl_seconds=ttl_seconds, signature=signature)
        if broke is not None:
            self.breaks.append(broke)
        return broke

    def expect_break(self) -> None:
        """The prefix is being rewritten on purpose (compaction, clearing, snip): the next
        response sets a new baseline instead of being compared with the old one."""
        self._baseline = self._baseline.reset()
