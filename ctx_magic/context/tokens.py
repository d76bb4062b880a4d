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

from ctx_magic.context import api_count, model_families
from ctx_magic.context.o200k import o200k_tokens
from ctx_magic.messages import Block, Message, Usage
from ctx_magic.settings import DEFAULTS

DEFAULT_FAMILY = model_families.family_of(DEFAULTS.model)
# The counter is calibrated on real traffic (median error about 1 % on whole requests), so an
# estimate starts unpadded; the ratio then follows what the API reports (Correction).
STARTING_RATIO = 1.0


def count_text(text: str, *, use_tokenizer: bool = True, family: model_families.Family = DEFAULT_FAMILY) -> int:
    """Tokens of a piece of text in the API's unit (the default model's tokenizer unless told)."""
    if not text:
        return 0
    if use_tokenizer:
        return model_families.text_tokens(text, family)
    return math.ceil(o200k_tokens(text, use_tokenizer=False) * family.text_factor)


def block_tokens(block: Block, family: model_families.Family = DEFAULT_FAMILY) -> int:
    """One content block as the API counts it, its wrapper included."""
    return api_count.block_tokens(block, family)


def message_tokens(message: Message, family: model_families.Family = DEFAULT_FAMILY) -> int:
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

    Every response's usage tells the true size of what was estimated before it. The ratio is
    the sum of those true sizes over the sum of their estimates (big samples weigh more than
    small ones, older ones fade), starting from 1.0 since the estimate is calibrated: the start
    counts as PRIOR_TOKENS of estimate, so one noisy sample cannot swing it, while a server that
    counts in another unit is learned within a response or two (the first observation covers
    the whole first request). Ratio of sums with this prior: median error 10.5 % on the real
    Claude Code deltas, against 15 % for a moving average of per-response ratios
    (benchmarks/calibration.py).
    """

    ratio: float = STARTING_RATIO
    observations: int = 0
    weight: float = 1_000.0
    """Estimated tokens behind `ratio` (the prior's PRIOR_TOKENS, decayed, plus what was observed)."""

    PRIOR_TOKENS = 1_000.0
    DECAY = 0.95  # per observation: a change of model or server is followed, old samples fade
    # Small deltas are dominated by per-message framing tokens; they teach nothing.
    MIN_SAMPLE_TOKENS = 200
    BOUNDS = (0.25, 4.0)

    def observe(self, estimated: int, actual: int) -> Correction:
        if estimated < self.MIN_SAMPLE_TOKENS or actual <= 0:
            return self
        sample = min(max(actual / estimated, self.BOUNDS[0]), self.BOUNDS[1])
        kept = self.weight * self.DECAY
        weight = kept + estimated
        ratio = (self.ratio * kept + sample * estimated) / weight
        return dataclasses.replace(self, ratio=ratio, observations=self.observations + 1, weight=weight)


@dataclass(frozen=True)
class ContextCount:
    """How big the live context is and how that figure was reached (the anchored count)."""

    tokens: int
    anchor_tokens: int  # from the API's usage (0 when no response yet)
    estimated_tokens: int  # unpadded estimate of the messages after the anchor
    anchor_index: int  # index of the first message of the last response, -1 if none
    freed_tokens: int = 0  # what layers removed from before the anchor since it was billed


OVERHEAD_META = "overhead_tokens"
"""Meta key on an answer: what the system prompt and tools took in the request it answered."""


def find_anchor(messages: Sequence[Message]) -> int:
    """Index of the *first* message carrying the last response's id, or -1.

    Parallel tool calls can split one response over several assistant messages with tool
    results in between; anchoring at the last of them would miss those results (Claude Code anchors at the first).
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

    `overhead_tokens` (system prompt and tools) counts whole when no response anchors the
    count, else by what it grew since the response was billed (its message's `overhead_tokens`
    meta: the context tools come in with the first cut); `freed_since_anchor` subtracts what
    layers removed from before the anchor since that response was billed.
    """
    ratio = (correction or Correction()).ratio
    anchor = find_anchor(messages)
    if anchor < 0:
        estimated = estimate_messages(messages) + overhead_tokens
        return ContextCount(math.ceil(estimated * ratio), 0, estimated, -1)
    usage: Usage = messages[anchor].usage  # type: ignore[assignment]
    billed = messages[anchor].meta.get(OVERHEAD_META)
    grown = overhead_tokens - billed if isinstance(billed, int) else 0
    # The response's own later parts (parallel tool calls split over several messages) are
    # already in its output_tokens: only what came between and after them is estimated.
    api_id = messages[anchor].api_id
    estimated = estimate_messages([m for m in messages[anchor + 1 :] if m.api_id != api_id])
    anchored = usage.context_tokens + grown
    tokens = anchored + math.ceil(estimated * ratio) - freed_since_anchor
    return ContextCount(max(0, tokens), anchored, estimated, anchor, freed_since_anchor)
