"""Whether the next call finds the prompt cache warm, and what it writes when it does not.

A main call stores the prefix it sent for the cache's lifetime (5 minutes by default, or an hour),
and each call that reads it refreshes it. The next call reads that prefix while it lives and while
the request still starts the same way. Past the lifetime (an idle gap), or once what opens every
request changed (the system prompt, the tools, the model, the thinking settings) or the messages
were rewritten (a compaction), the whole context is written again, billed at the cache-write
price: 1.25 times the input price for the 5-minute lifetime, twice for the hour (prices.py).

So the next call's write can be told before it is made: the context's size times that price.
Whether the cache is cold is decided from the clock at the moment of reading, since nothing runs
between cells to notice the lifetime passing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctx_magic.prices import PER_MILLION, Prices

WARM = "warm"
COLD = "cold"
EMPTY = "empty"  # before the session's first call: nothing to find, so nothing to warn of either


@dataclass(frozen=True)
class CacheOutlook:
    """The prompt cache as the next call will find it."""

    state: str
    """'warm' (the next call reads the cached prefix), 'cold' (it writes the whole context again) or
    'empty' (no call yet: the first one writes it, as every first call does)."""
    reason: str
    """Why, in a few words."""
    ttl: str
    """The lifetime the requests ask for: '5m' or '1h'."""
    ttl_seconds: float
    expires_at: float | None
    """When the cached prefix expires, on the session's clock (None before the first call)."""
    seconds_left: float
    """Seconds until then, at the moment of reading (0 once cold)."""
    write_tokens: int
    """What the next call writes to the cache: the whole context when cold or empty, 0 when warm."""
    write_usd: float | None
    """What that write costs (None: the model's prices are unknown)."""

    @property
    def cold(self) -> bool:
        return self.state == COLD

    def to_json(self) -> dict[str, object]:
        return {"state": self.state, "reason": self.reason, "ttl": self.ttl, "ttl_seconds": self.ttl_seconds,
                "expires_at": self.expires_at, "seconds_left": round(self.seconds_left, 1),
                "write_tokens": self.write_tokens,
                "write_usd": None if self.write_usd is None else round(self.write_usd, 6)}

    def rewritten(self, reason: str, tokens: int, prices: Prices) -> CacheOutlook:
        """The same outlook once something outside the session (a setting changed, not yet
        applied) will rewrite the prefix: cold, whatever the clock says."""
        if self.cold:
            return self
        usd = None if prices.source == "unknown" else tokens * write_price(prices, self.ttl, tokens) / PER_MILLION
        return CacheOutlook(COLD, reason, self.ttl, self.ttl_seconds, self.expires_at, 0.0, tokens, usd)


def write_price(prices: Prices, ttl: str, tokens: int) -> float:
    """USD per million tokens written to the cache with lifetime `ttl`, for a prompt of `tokens`."""
    rates = prices.for_prompt(tokens)
    return rates.cache_write_1h if ttl == "1h" else rates.cache_write_5m


def cache_outlook(*, tokens: int, last_call_at: float | None, now: float, ttl: str, ttl_seconds: float,
                  rewritten: str = "", prices: Prices) -> CacheOutlook:
    """The cache the next call finds, from when the model last answered and what changed since.

    Cold past the lifetime or when `rewritten` names what rewrites the prefix, empty before any
    call, warm otherwise. A cold (or empty) cache's write is the context's size at the cache-write
    price.
    """
    expires_at = None if last_call_at is None else last_call_at + ttl_seconds
    if rewritten:
        state, reason = COLD, rewritten
    elif last_call_at is None:
        state, reason = EMPTY, "no call has cached this context yet"
    elif now >= last_call_at + ttl_seconds:
        idle = now - last_call_at
        state, reason = COLD, f"idle {idle / 60:.0f} min, past the cache's {ttl} lifetime"
    else:
        state, reason = WARM, f"the last call cached it {(now - last_call_at) / 60:.0f} min ago"
    left = max(0.0, expires_at - now) if state == WARM and expires_at is not None else 0.0
    write = 0 if state == WARM else tokens
    usd = None if prices.source == "unknown" else write * write_price(prices, ttl, tokens) / PER_MILLION
    return CacheOutlook(state, reason, ttl, ttl_seconds, expires_at, left, write, usd)
