"""What each choice about the context costs over the calls expected to follow (pure arithmetic).

Prices are Anthropic's, relative to one uncached input token: a cache read costs 0.1, a cache
write 1.25 (5-minute lifetime) or 2 (1-hour), output 5. A call sends the whole context: the part
the cache holds from the previous call is read, the rest is written. So a clearing is not free
while the cache is warm: everything after the first cleared result is written again. A
compaction pays for its summary (the conversation read, the summary written as output) and
then for writing the new, smaller context. What both buy is cheaper reads on every later call.

`outlook_cost` plays the next calls forward from a starting point, compactions forced at the
threshold included, and adds up the bill; decide.py compares the options with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctx_magic.prices import Prices as ModelPrices

READ_PRICE = 0.1  # cache read, per input token
WRITE_PRICES = {"5m": 1.25, "1h": 2.0}  # cache write for each lifetime
OUTPUT_PRICE = 5.0
MAX_HORIZON_CALLS = 200  # the outlook stops here: beyond it, guesses about a session are noise


@dataclass(frozen=True)
class RelativePrices:
    """A model's prices as multiples of its price for one uncached input token."""

    read: float = READ_PRICE
    write: float = WRITE_PRICES["5m"]
    output: float = OUTPUT_PRICE

    @classmethod
    def for_ttl(cls, ttl: str) -> RelativePrices:
        return cls(write=WRITE_PRICES.get(ttl, WRITE_PRICES["5m"]))

    @classmethod
    def of_model(cls, dollars: ModelPrices, ttl: str) -> RelativePrices:
        """A model's list prices as multiples of its input price (Anthropic's usual ratios when
        the price is not known): some models read from the cache at less than a tenth."""
        if dollars.input <= 0:
            return cls.for_ttl(ttl)
        write = dollars.cache_write_1h if ttl == "1h" else dollars.cache_write_5m
        return cls(read=dollars.cache_read / dollars.input, write=write / dollars.input,
                   output=dollars.output / dollars.input)


@dataclass(frozen=True)
class Outlook:
    """What the calls after this one are expected to look like."""

    calls: int
    """How many more main calls the session is expected to make."""
    growth: int
    """Tokens each call adds to the context (the reply, tool results, the next message)."""
    threshold: int
    """Where a compaction is forced."""
    after_compaction: int
    """The context's size right after a compaction."""
    summary_output: int
    """Output tokens a forced compaction's summary costs."""


@dataclass(frozen=True)
class Start:
    """The context the next call sends, how much of it the cache holds, and what it took to get here."""

    tokens: int
    cached: int
    spent: float = 0.0


def call_cost(tokens: int, cached: int, prices: RelativePrices) -> float:
    """One request's input: the cached prefix read, the rest written."""
    cached = max(0, min(cached, tokens))
    return prices.read * cached + prices.write * (tokens - cached)


def outlook_cost(start: Start, outlook: Outlook, prices: RelativePrices) -> float:
    """The input bill of the next `outlook.calls` calls from `start` (outputs every option shares
    are left out), forced compactions included."""
    total = start.spent
    tokens, cached = start.tokens, start.cached
    for _ in range(max(0, min(outlook.calls, MAX_HORIZON_CALLS))):
        total += call_cost(tokens, cached, prices)
        tokens, cached = tokens + outlook.growth, tokens
        if tokens >= outlook.threshold:
            total += call_cost(tokens, cached, prices) + prices.output * outlook.summary_output
            tokens, cached = outlook.after_compaction, 0
    return total


def summary_start(tokens: int, cached: int, prices: RelativePrices, *, after: int, summary_output: int) -> Start:
    """Where the next call starts after summarizing now: the summary call paid, a new context."""
    return Start(after, 0, call_cost(tokens, cached, prices) + prices.output * summary_output)
