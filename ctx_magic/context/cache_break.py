"""Prompt-cache break detection (its baseline is reset after a compaction).

Each response says how many prompt tokens were read from the cache. When that figure falls
against the previous response by more than 5 % of it and by more than 2,000 tokens, the cached
prefix was lost: a "cache break". Some breaks are expected and are not reported: a compaction,
a clearing or a snip rewrites the prefix on purpose, so they reset the baseline and the next
response sets a new one. A break after an idle gap longer than the cache TTL is explained by
expiry; any other break is unexplained, which is what a person tuning a session wants to see.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ctx_magic.events import CacheBroke
from ctx_magic.messages import Usage

MIN_DROP_TOKENS = 2_000  # below this, server-side cache churn, not a break
MIN_DROP_SHARE = 0.05  # and the drop must be over 5 % of the previous read


@dataclass(frozen=True)
class CacheBaseline:
    """The previous response's cache read, when it came and the signature of the system prompt
    and tools it was sent with; `cache_read` is None after an expected break."""

    cache_read: int | None = None
    at: float | None = None
    signature: str = ""

    def reset(self) -> CacheBaseline:
        return dataclasses.replace(self, cache_read=None)


def observe(baseline: CacheBaseline, usage: Usage, now: float, *, ttl_seconds: float,
            signature: str = "") -> tuple[CacheBaseline, CacheBroke | None]:
    """The new baseline after one main-loop response, and the break it shows, if any."""
    new = CacheBaseline(usage.cache_read_input_tokens, now, signature)
    previous = baseline.cache_read
    if previous is None:
        return new, None
    drop = previous - usage.cache_read_input_tokens
    if drop <= MIN_DROP_TOKENS or drop <= previous * MIN_DROP_SHARE:
        return new, None
    idle = None if baseline.at is None else now - baseline.at
    if idle is not None and idle > ttl_seconds:
        reason = f"the cache expired after {idle / 60:.0f} min idle"
    elif signature != baseline.signature:
        reason = "the system prompt or the tools changed"
    else:
        reason = "unexplained"
    return new, CacheBroke(previous, usage.cache_read_input_tokens, usage.cache_creation_input_tokens,
                           expected=reason != "unexplained", reason=reason)
