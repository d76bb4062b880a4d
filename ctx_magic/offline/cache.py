"""Prompt-caching simulation: which part of a request the cache already holds.

The rule, close to the API's: blocks carrying `cache_control` are breakpoints. A request reads
the longest stored prefix that matches it at a block boundary, provided that boundary is not
past its last breakpoint (without a breakpoint nothing is cached or read). The tokens from
there up to the last breakpoint are written: every breakpoint's prefix is stored with its
lifetime (5 minutes, or 1 hour for `ttl: "1h"`), and reading a prefix refreshes it. The rest
is plain input. The three figures always add up to the request's input tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctx_magic.offline.counting import TTL_SECONDS, Segment

Clock = Callable[[], float]


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

    def account(self, segments: Sequence[Segment]) -> CacheUsage:
        """Split a request's tokens into read / written / plain, and update the store."""
        now = self._clock()
        total = sum(s.tokens for s in segments)
        breakpoints = [i for i, s in enumerate(segments) if s.ttl is not None]
        if not breakpoints:
            return CacheUsage(total, 0, 0)
        last = breakpoints[-1]
        hit = next((i for i in range(last, -1, -1) if self._live(segments[i].prefix_hash, now)), -1)
        if hit >= 0:
            self._store(segments[hit].prefix_hash, self._entries[segments[hit].prefix_hash].ttl, now)
        read = sum(s.tokens for s in segments[: hit + 1])
        written = {"5m": 0, "1h": 0}
        start = hit + 1
        for index in breakpoints:
            ttl = segments[index].ttl or "5m"
            if index >= start:
                written[ttl] += sum(s.tokens for s in segments[start : index + 1])
                start = index + 1
            self._store(segments[index].prefix_hash, ttl, now)
        creation = written["5m"] + written["1h"]
        return CacheUsage(total - read - creation, creation, read, written["5m"], written["1h"])
