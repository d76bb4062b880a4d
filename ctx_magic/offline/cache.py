"""Prompt-caching simulation that bills a request the way Anthropic's prompt-caching docs describe.

The prompt is a row of blocks in a fixed order: tool definitions, then system blocks, then the
content blocks of every message (counting.py). What the cache holds is prefixes of that row,
each one stored under the hash of everything up to and including its last block.

- **Breakpoints.** A block with `cache_control` (at most 4 a request; the top-level
  `cache_control` puts one on the last block) marks a prefix to store. Nothing is stored or read
  without a breakpoint.
- **Lookup, 20 blocks back.** Each breakpoint looks for a stored prefix ending at its own block,
  then at each earlier block boundary, but no further than `LOOKBACK_BLOCKS` blocks back. The
  longest prefix any breakpoint finds is the hit. A conversation that grew by more than 20
  blocks past the last stored prefix, with its only breakpoint on the newest block, reads
  nothing: the whole prompt is written again.
- **Minimum length.** A breakpoint whose prefix is shorter than the model's minimum cacheable
  length (`minimum_cacheable_tokens`) neither stores nor looks up: it reports nothing, as if it
  were not there.
- **Billing**, with A the tokens up to the hit (0 without one), B those up to the last 1-hour
  breakpoint after A (A if none) and C those up to the last breakpoint: A tokens are read,
  B - A written at the 1-hour rate, C - B written at the 5-minute rate, the rest is plain
  input. The three figures add up to the request's input tokens.
- **Lifetime.** Every breakpoint's prefix is stored (or refreshed) with its TTL, 5 minutes by
  default or 1 hour; the hit is refreshed too. Time comes from the injected clock; a prefix
  not used for its TTL is gone. A longer lifetime already held is never shortened.
- **Invalidation** follows from the hashes: a change in the tools changes every prefix; a
  change in the system prompt, every system and message prefix; a change of tool_choice, of the
  thinking settings, or of whether the prompt holds images at all, every message prefix
  (counting.message_context), while tools and system stay cached.

Not modelled: the API drops the thinking blocks of earlier turns once a new user turn starts,
which changes the prefix after them; here they stay part of it (counted as nothing for a model
that drops them, as `api_count` counts them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from ctx_magic.offline.counting import TTL_SECONDS, Segment

Clock = Callable[[], float]

LOOKBACK_BLOCKS = 20  # the docs: each breakpoint checks about 20 block boundaries back for a hit
DEFAULT_MIN_CACHEABLE = 1_024  # the Sonnet and Opus 4.x / Sonnet 5 minimum, for ids the table lacks
# Minimum cacheable prompt length by model-id prefix, first match wins (Anthropic's
# prompt-caching docs, "Cache limitations"; the 5-family figures from the Bedrock guide).
MIN_CACHEABLE_BY_MODEL: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-5", 4_096),
    ("claude-opus-4-6", 4_096),
    ("claude-opus-4-7", 4_096),
    ("claude-mythos-preview", 4_096),
    ("claude-haiku-4-5", 4_096),
    ("claude-3-5-haiku", 2_048),
    ("claude-3-haiku", 2_048),
    ("claude-opus-5", 512),
    ("claude-mythos-5", 512),
    ("claude-fable-5", 512),
)


def minimum_cacheable_tokens(model: str) -> int:
    """The shortest prefix `model` caches, in tokens."""
    return next((minimum for prefix, minimum in MIN_CACHEABLE_BY_MODEL if model.startswith(prefix)),
                DEFAULT_MIN_CACHEABLE)


@dataclass(frozen=True)
class CacheUsage:
    """The three parts of a request's input tokens, as the API's usage reports them."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.ephemeral_5m_input_tokens,
                "ephemeral_1h_input_tokens": self.ephemeral_1h_input_tokens,
            },
        }


@dataclass(frozen=True)
class CachePlan:
    """What one request does to the cache: its usage, the hit, and the prefixes to store."""

    usage: CacheUsage
    hit: int | None  # index of the last block of the prefix read, None on a miss
    stores: tuple[tuple[str, str], ...] = field(default=())  # (prefix hash, ttl) to store or refresh


def plan_request(segments: Sequence[Segment], is_live: Callable[[str], bool], minimum: int = 0) -> CachePlan:
    """Decide reads, writes and stores for one request (pure: `is_live` says what the cache holds)."""
    ends = list(accumulate(s.tokens for s in segments))  # tokens up to and including each block
    total = ends[-1] if ends else 0
    marks = [i for i, s in enumerate(segments) if s.ttl is not None and ends[i] >= minimum]
    if not marks:
        return CachePlan(CacheUsage(total, 0, 0), None)
    hit: int | None = None
    for mark in marks:
        for position in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
            if is_live(segments[position].prefix_hash):
                hit = position if hit is None else max(hit, position)
                break
    read = ends[hit] if hit is not None else 0
    later = [m for m in marks if hit is None or m > hit]
    one_hour = [m for m in later if segments[m].ttl == "1h"]
    upto_1h = ends[one_hour[-1]] if one_hour else read
    upto_last = ends[later[-1]] if later else read
    written_1h, written_5m = upto_1h - read, upto_last - upto_1h
    creation = written_1h + written_5m
    stores = tuple((segments[m].prefix_hash, segments[m].ttl or "5m") for m in marks)
    usage = CacheUsage(total - read - creation, creation, read, written_5m, written_1h)
    return CachePlan(usage, hit, stores)


@dataclass(frozen=True)
class _Entry:
    ttl: str
    expires_at: float


class PromptCache:
    """Stored prefix hashes with their expiry times, read and written by `account`."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def _live(self, prefix_hash: str, now: float) -> _Entry | None:
        entry = self._entries.get(prefix_hash)
        if entry is not None and entry.expires_at <= now:
            del self._entries[prefix_hash]
            return None
        return entry

    def _store(self, prefix_hash: str, ttl: str, now: float) -> None:
        """Store or refresh a prefix; a longer lifetime already held is never shortened."""
        old = self._live(prefix_hash, now)
        if old is not None and TTL_SECONDS[old.ttl] > TTL_SECONDS[ttl]:
            ttl = old.ttl
        self._entries[prefix_hash] = _Entry(ttl, now + TTL_SECONDS[ttl])

    def account(self, segments: Sequence[Segment], minimum: int = 0) -> CacheUsage:
        """Split a request's tokens into read / written / plain, and update the store.

        `minimum` is the model's minimum cacheable length (0: every breakpoint counts).
        """
        now = self._clock()
        plan = plan_request(segments, lambda h: self._live(h, now) is not None, minimum)
        if plan.hit is not None:
            read_hash = segments[plan.hit].prefix_hash
            self._store(read_hash, self._entries[read_hash].ttl, now)  # a read refreshes the lifetime
        for prefix_hash, ttl in plan.stores:
            self._store(prefix_hash, ttl, now)
        return plan.usage
