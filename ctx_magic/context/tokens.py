"""Token accounting: the API's usage where it exists, a local estimate after it.

The estimate counts the way the Messages API does (`api_count`: o200k tokens scaled to the
API's tokenizer, with the framing around each block), for the project's default model unless
told another; what no usage has measured yet is estimated, and the ratio of the API's figures
to the estimate is learned from every response (`Correction`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ctx_magic.context import api_count
from ctx_magic.context.o200k import EXACT_COUNT_CHARS as EXACT_COUNT_CHARS
from ctx_magic.context.o200k import encoding as encoding
from ctx_magic.context.o200k import looks_like_json as looks_like_json
from ctx_magic.context.o200k import o200k_tokens
from ctx_magic.messages import Block, Message, Usage
from ctx_magic.settings import DEFAULT_MODEL

DEFAULT_FAMILY = api_count.family_of(DEFAULT_MODEL)
# The counter is calibrated on real traffic (median error about 1 % on whole requests), so an
# estimate starts unpadded; the ratio then follows what the API reports (Correction).
STARTING_RATIO = 1.0


def count_text(text: str, *, use_tokenizer: bool = True, family: api_count.Family = DEFAULT_FAMILY) -> int:
    """Tokens of a piece of text in the API's unit (the default model's tokenizer unless told)."""
    if not text:
        return 0
    return math.ceil(o200k_tokens(text, use_tokenizer=use_tokenizer) * family.text_factor)


def block_tokens(block: Block, family: api_count.Family = DEFAULT_FAMILY) -> int:
    """One content block as the API counts it, its wrapper included."""
    return api_count.block_tokens(block, family)


def message_tokens(message: Message, family: api_count.Family = DEFAULT_FAMILY) -> int:
    """Estimate of one message (its header and blocks), memoized on the (immutable) message."""
    key = "tokens" if family is DEFAULT_FAMILY else f"tokens:{family.name}"
    cached = message.memo.get(key)
    if cached is None:
        cached = message.memo[key] = api_count.ROLE_CHANGE + sum(block_tokens(b, family) for b in message.content)
    return cached


def estimate_messages(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages if m.sent)


@dataclass(frozen=True)
class Correction:
    """A learned ratio of the API's tokens to local estimates.

    Every response's usage tells the true size of the messages we estimated before it; an
    exponential moving average of that ratio follows it (from 1.0: the estimate is calibrated).
    A server that counts differently (another tokenizer, hidden additions) is learned from the
    first response on.
    """

    ratio: float = STARTING_RATIO
    observations: int = 0

    # Small deltas are dominated by per-message framing tokens; they teach nothing.
    MIN_SAMPLE_TOKENS = 200
    SMOOTHING = 0.3
    BOUNDS = (0.25, 4.0)

    def observe(self, estimated: int, actual: int) -> Correction:
        if estimated < self.MIN_SAMPLE_TOKENS or actual <= 0:
            return self
        sample = min(max(actual / estimated, self.BOUNDS[0]), self.BOUNDS[1])
        if self.observations == 0:
            return dataclasses.replace(self, ratio=sample, observations=1)
        ratio = (1 - self.SMOOTHING) * self.ratio + self.SMOOTHING * sample
        return dataclasses.replace(self, ratio=ratio, observations=self.observations + 1)


@dataclass(frozen=True)
class ContextCount:
    """How big the live context is and how that figure was reached (SPEC T1)."""

    tokens: int
    anchor_tokens: int  # from the API's usage (0 when no response yet)
    estimated_tokens: int  # unpadded estimate of the messages after the anchor
    anchor_index: int  # index of the first message of the last response, -1 if none
    freed_tokens: int = 0  # what layers removed from before the anchor since it was billed


def find_anchor(messages: Sequence[Message]) -> int:
    """Index of the *first* message carrying the last response's id, or -1.

    Parallel tool calls can split one response over several assistant messages with tool
    results in between; anchoring at the last of them would miss those results (seeds).
    """
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].usage is not None and messages[i].api_id:
            api_id = messages[i].api_id
            first = i
            for j in range(i - 1, -1, -1):
                if messages[j].api_id == api_id:
                    first = j
                elif messages[j].role == "assistant" and messages[j].api_id:
                    break  # an earlier response: ours started after it
            return first
    return -1


def count_context(
    messages: Sequence[Message],
    *,
    overhead_tokens: int = 0,
    freed_since_anchor: int = 0,
    correction: Correction | None = None,
) -> ContextCount:
    """Usage of the last response + the padded estimate of everything after it.

    `overhead_tokens` (system prompt and tools) only counts when no response anchors the
    count; `freed_since_anchor` subtracts what layers removed from before the anchor since
    that response was billed.
    """
    ratio = (correction or Correction()).ratio
    anchor = find_anchor(messages)
    if anchor < 0:
        estimated = estimate_messages(messages) + overhead_tokens
        return ContextCount(math.ceil(estimated * ratio), 0, estimated, -1)
    usage: Usage = messages[anchor].usage  # type: ignore[assignment]
    # The response's own later parts (parallel tool calls split over several messages) are
    # already in its output_tokens: only what came between and after them is estimated.
    api_id = messages[anchor].api_id
    estimated = estimate_messages([m for m in messages[anchor + 1 :] if m.api_id != api_id])
    tokens = usage.context_tokens + math.ceil(estimated * ratio) - freed_since_anchor
    return ContextCount(max(0, tokens), usage.context_tokens, estimated, anchor, freed_since_anchor)
