"""Whether the next turn will compact, told at the end of this one.

The rule: a turn adds about `growth` tokens to the context (a call's recent median growth times
the calls a turn makes). The next turn compacts when the decision (decide.py, the one place that
decides) plans a compaction for the context as this turn leaves it, grown by one turn: at the
threshold, unless a clearing gets under it more cheaply, or earlier when a summary pays back.
Said one turn early, the user can let that turn through while the context still fits under the
blocking limit, or compact by hand with instructions of their own.

The price is told with it: the summary call reads the context (from the cache while it is warm,
else writing it) and writes the summary as output, and the call after it writes the new, smaller
context to the cache. A compaction from the session's notes makes no summary call. The sizes are
the decision's own expectations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ctx_magic.context.cache_outlook import write_price
from ctx_magic.context.decide import COMPACT_FROM_NOTES, Situation, decide
from ctx_magic.prices import PER_MILLION, Prices


@dataclass(frozen=True)
class CompactionAhead:
    """The automatic compaction the next turn is expected to make, and what it will cost."""

    tokens: int
    """The context now."""
    growth: int
    """What the next turn is expected to add."""
    threshold: int
    blocking: int
    summary_tokens: int
    """The summary's expected length (its output; 0 from the notes)."""
    tokens_after: int
    """The context's expected size after it."""
    cost_usd: float | None
    """The summary call and the write of the new context (None: the model's prices are unknown)."""
    reason: str
    """The decision's reason for it."""
    deferred: bool = False
    """The user let the next turn through (it compacts only at the blocking limit)."""

    @property
    def fits_one_more_turn(self) -> bool:
        """Whether one more turn's growth stays under the blocking limit (a deferral can hold)."""
        return self.tokens + self.growth < self.blocking

    def to_json(self) -> dict[str, object]:
        return {"tokens": self.tokens, "growth": self.growth, "threshold": self.threshold, "blocking": self.blocking,
                "summary_tokens": self.summary_tokens, "tokens_after": self.tokens_after,
                "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6), "reason": self.reason,
                "deferred": self.deferred, "fits_one_more_turn": self.fits_one_more_turn}


def compaction_ahead(seen: Situation, growth: int, *, warm: bool, prices: Prices, ttl: str,
                     deferred: bool = False) -> CompactionAhead | None:
    """The compaction the next turn makes, or None (pure): the decision for `seen` grown by one
    turn's `growth`, as if nothing were deferred. `warm`: the summary reads the context from the
    cache; `deferred`: the user already let the next turn through.
    """
    grown = dataclasses.replace(seen, tokens=seen.tokens + max(0, growth),
                                facts=dataclasses.replace(seen.facts, deferred=False))
    plan = decide(grown)
    if not plan.compact:
        return None
    th = seen.thresholds
    from_notes = plan.compact[0] == COMPACT_FROM_NOTES and grown.after_notes() < th.autocompact
    summary = 0 if from_notes else grown.expected_summary()
    after = grown.after_notes() if from_notes else grown.after_summary()
    cost = None
    if prices.source != "unknown":
        tokens = seen.tokens
        rates = prices.for_prompt(tokens)
        read = 0.0 if from_notes else (rates.cache_read if warm else write_price(prices, ttl, tokens)) * tokens
        cost = (read + rates.output * summary + write_price(prices, ttl, after) * after) / PER_MILLION
    return CompactionAhead(seen.tokens, max(0, growth), th.autocompact, th.blocking, summary, after, cost,
                           plan.why_compact, deferred)
