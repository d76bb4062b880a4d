"""What a session spends, in tokens and in dollars, what its context changes saved, and
whether its prompt cache holds (the cache-break detector).

Main calls and side calls (summaries, notes, memories) all add to the totals, from any
thread; only main-loop responses are compared with the previous one for cache breaks.

Savings: tokens a change took out of the live context (a result cleared or persisted, a snip,
a compaction, thinking cleared) are not sent again with any later main call. Each main call
adds, for every kind of change, the tokens it has taken out so far, priced at the cache-read
rate: had they stayed, they would mostly have been read from the cache, so this is a lower
bound. The server's context edits save their `cleared_input_tokens` on the call they apply to.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctx_magic.context.cache_break import CacheBaseline, observe
from ctx_magic.events import CacheBroke
from ctx_magic.messages import Usage
from ctx_magic.prices import PER_MILLION, UNKNOWN_PRICES, Billed, Prices, cost_usd


def billed(usage: Usage) -> Billed:
    """A usage in the five kinds of tokens the price table bills."""
    one_hour = min(usage.cache_creation_1h_input_tokens, usage.cache_creation_input_tokens)
    return Billed(usage.input_tokens, usage.cache_creation_input_tokens - one_hour, one_hour,
                  usage.cache_read_input_tokens, usage.output_tokens)


COMPACTION_USAGE_META = "compaction_usage"
"""An answer's meta: the usage of the server compaction's own call, which the API bills beside
the answer's usage (its `iterations`), so that a replay prices the answer as it was billed."""


def answer_cost(usage: Usage, meta: Mapping[str, Any], prices: Prices) -> float:
    """What a recorded answer cost: its usage and any server compaction billed with it."""
    parts = [Usage.from_json(part) for part in meta.get(COMPACTION_USAGE_META) or () if isinstance(part, Mapping)]
    return sum(cost_usd(billed(u), prices) for u in (usage, *parts))


@dataclass
class UsageTotals:
    calls: int = 0
    main_calls: int = 0
    """Calls of the conversation itself (the others are side calls: summaries, notes, memories)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0
    cost_usd: float = 0.0
    """Dollars spent on every call of the session, at the prices in force when each was made."""
    saved_usd: dict[str, float] = field(default_factory=dict)
    """Dollars not spent thanks to each kind of change (a lower bound, see the module doc)."""
    freed_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens each kind of change has taken out of the live context so far."""

    def add(self, usage: Usage, cost: float = 0.0, *, call: bool = True) -> None:
        self.calls += 1 if call else 0
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_creation_input_tokens += usage.cache_creation_input_tokens
        self.cache_read_input_tokens += usage.cache_read_input_tokens
        self.cache_creation_1h_input_tokens += usage.cache_creation_1h_input_tokens
        self.cost_usd += cost

    def count_main_call(self) -> None:
        """One more call of the conversation itself."""
        self.main_calls += 1

    @property
    def saved_total_usd(self) -> float:
        return sum(self.saved_usd.values())

    @property
    def cache_hit_ratio(self) -> float:
        prompt = self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
        return self.cache_read_input_tokens / prompt if prompt else 0.0

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["cost_usd"] = round(self.cost_usd, 6)
        data["saved_usd"] = {k: round(v, 6) for k, v in self.saved_usd.items()}
        return data


GROWTH_WINDOW = 8  # the recent calls whose growth predicts the next ones


class UsageMeter:
    """The session's usage totals and the cache-break watch over its main calls."""

    def __init__(self, totals: Mapping[str, Any] | None = None, *,
                 prices: Callable[[], Prices] = lambda: UNKNOWN_PRICES) -> None:
        self._lock = threading.Lock()
        self.totals = UsageTotals()
        self._last_prompt: int | None = None
        self._growths: deque[int] = deque(maxlen=GROWTH_WINDOW)
        self.restore(totals or {})
        self.prices = prices
        """The prices in force (the session's model, with any contract prices)."""
        self.breaks: list[CacheBroke] = []
        self._baseline = CacheBaseline()

    def restore(self, totals: Mapping[str, Any], growth: Mapping[str, Any] | None = None) -> None:
        """At resume: the totals state.json kept, and the growth of the last calls (`growth_json`).
        In place, since the live context and the side calls hold this meter."""
        known = {f.name for f in dataclasses.fields(UsageTotals)}
        with self._lock:
            self.totals = UsageTotals(**{k: v for k, v in totals.items() if k in known})
        growth = growth or {}
        last = growth.get("last_prompt")
        self._last_prompt = int(last) if isinstance(last, int) else None
        self._growths = deque((int(g) for g in growth.get("growths") or [] if isinstance(g, int)),
                              maxlen=GROWTH_WINDOW)

    def growth_json(self) -> dict[str, Any]:
        """What state.json keeps of the growth watch: a resumed session weighs a clearing as the
        live one would have."""
        return {"last_prompt": self._last_prompt, "growths": list(self._growths)}

    def add(self, usage: Usage, *, call: bool = True) -> float:
        """One response's usage (side calls run in other threads); returns what it cost.
        `call=False` adds a part of a response already counted (a server compaction iteration)."""
        cost = cost_usd(billed(usage), self.prices())
        with self._lock:
            self.totals.add(usage, cost, call=call)
        return cost

    def freed(self, kind: str, tokens: int) -> None:
        """A change took `tokens` out of the live context for good (see the module doc)."""
        if tokens <= 0:
            return
        with self._lock:
            self.totals.freed_tokens[kind] = self.totals.freed_tokens.get(kind, 0) + tokens

    def count_savings(self, server_cleared: int = 0) -> float:
        """One main call was made without what the changes so far took out (and without what the
        server's edits cleared from it): those tokens priced at the cache-read rate."""
        rate = self.prices().cache_read / PER_MILLION
        saved = 0.0
        with self._lock:
            spared = dict(self.totals.freed_tokens)
            if server_cleared > 0:
                spared["cleared"] = spared.get("cleared", 0) + server_cleared
            for kind, tokens in spared.items():
                self.totals.saved_usd[kind] = self.totals.saved_usd.get(kind, 0.0) + tokens * rate
                saved += tokens * rate
        return saved

    def main_call(self, prompt_tokens: int) -> None:
        """A call of the conversation went out with this many prompt tokens."""
        with self._lock:
            self.totals.count_main_call()
        if self._last_prompt is not None and prompt_tokens > self._last_prompt:
            self._growths.append(prompt_tokens - self._last_prompt)  # a compaction's drop says nothing
        self._last_prompt = prompt_tokens

    def growth(self) -> int:
        """Tokens a call has been adding to the context lately (0 before two calls)."""
        return int(statistics.median(self._growths)) if self._growths else 0

    def snapshot(self) -> UsageTotals:
        with self._lock:
            return dataclasses.replace(self.totals, saved_usd=dict(self.totals.saved_usd),
                                       freed_tokens=dict(self.totals.freed_tokens))

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
