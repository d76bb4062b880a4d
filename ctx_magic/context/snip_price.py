"""What an automatic snip costs and saves, for the decision (pure arithmetic).

Past `snip_max_messages` live messages a snip can replace the middle by one marker. It is one of
the decision's options, not a fixed rule: the marker saves the middle's tokens on every later
call, but everything after it is written to the cache again, and on a model that checks each
thinking block's prefix the kept tail's thinking leaves with it (what came before it changed),
its reasoning lost: priced as the output it would take to think it again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctx_magic.context.costs import RelativePrices, Start

SNIP = "snip"


@dataclass(frozen=True)
class SnipPrice:
    """A snip the engine could make now, measured on the live context."""

    freed: int
    """Tokens the marker saves: the middle less the marker itself."""
    prefix: int
    """Tokens before the marker (the system prompt, the tools, the head): the cache keeps them."""
    thinking: int = 0
    """Thinking tokens in the kept tail that the cut invalidates (append-only conversations; else 0)."""
    messages: int = 0
    """Messages the marker stands for."""

    def tokens_after(self, tokens: int) -> int:
        return max(0, tokens - self.freed - self.thinking)

    def start(self, tokens: int, cached: int, prices: RelativePrices) -> Start:
        """Where the next call starts after the snip: the tail written again, the lost thinking paid."""
        return Start(self.tokens_after(tokens), min(cached, self.prefix), prices.output * self.thinking)

    def reason(self, tokens: int, why: str) -> str:
        lost = f" and drops {self.thinking:,} tokens of thinking after it" if self.thinking else ""
        return (f"{tokens:,} tokens: snipping {self.messages:,} messages from the middle frees "
                f"{self.freed:,}{lost} ({why})")
