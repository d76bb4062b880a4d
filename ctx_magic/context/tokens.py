"""Token accounting: the API's usage where it exists, a local estimate after it.

The estimate counts the way the Messages API does (`api_count`: Claude's tokenizer, else o200k
scaled, with the framing around each block), in the family of the model that wrote the last answer
(`estimate_family`); what no usage has measured yet is estimated, and the ratio of the API's figures
to the estimate is learned from every response (`Correction`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ctx_magic.context import api_count, block_count, model_families
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
    return block_count.block_tokens(block, family)


def message_tokens(message: Message, family: model_families.Family = DEFAULT_FAMILY) -> int:
    """Estimate of one message (its header and blocks), memoized on the (immutable) message."""
    key = "tokens" if family is DEFAULT_FAMILY else f"tokens:{family.name}"
    cached = message.memo.get(key)
    if cached is None:
        cached = message.memo[key] = api_count.ROLE_CHANGE + sum(block_tokens(b, family) for b in message.content)
    return cached


def estimate_family(messages: Sequence[Message]) -> model_families.Family:
    """The unit the engine estimates in: the tokenizer family of the model that wrote the last
    answer (its usage anchors the count, and the family's unit is the API's), the default model's
    before any answer. Counted in another family, the text of a Claude 4 conversation would be
    about 30 % off, which the learned ratio takes many responses to absorb."""
    for message in reversed(messages):
        model = message.meta.get("model") if message.role == "assistant" else None
        if isinstance(model, str):
            return model_families.family_of(model)
    return DEFAULT_FAMILY


def estimate_messages(messages: Sequence[Message], family: model_families.Family = DEFAULT_FAMILY) -> int:
    return sum(message_tokens(m, family) for m in messages if m.sent)


@dataclass(frozen=True)
class Correction:
    """A learned ratio of the API's tokens to local estimates.

    Every response's usage tells the true size of what was estimated before it. The ratio is the
    median of the last RECENT samples (actual / estimated), the starting 1.0 among them until
    they push it out: the estimate is calibrated, so it starts unpadded. A median ignores the
    odd response whose delta holds something the estimate never saw (twice or four times its
    estimate) yet follows a server that counts in another unit within two responses. On the real
    Claude Code deltas, counted in the model's family, a ratio of sums (big samples weigh more)
    drifted to a median error of 10 % on such outliers; the median keeps it near 2.5 %
    (benchmarks/calibration.py).
    """

    ratio: float = STARTING_RATIO
    observations: int = 0
    recent: tuple[float, ...] = ()
    """The last samples behind `ratio`, oldest first (empty: `ratio` alone is what is known)."""

    RECENT = 7  # samples the median is taken over: odd, and enough that two outliers in a row pass
    # Small deltas are dominated by per-message framing tokens; they teach nothing.
    MIN_SAMPLE_TOKENS = 200
    BOUNDS = (0.25, 4.0)

    def observe(self, estimated: int, actual: int) -> Correction:
        if estimated < self.MIN_SAMPLE_TOKENS or actual <= 0:
            return self
        sample = min(max(actual / estimated, self.BOUNDS[0]), self.BOUNDS[1])
        recent = (*(self.recent or (self.ratio,)), sample)[-self.RECENT:]
        return Correction(statistics.median(recent), self.observations + 1, recent)


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
    family = estimate_family(messages)
    anchor = find_anchor(messages)
    if anchor < 0:
        estimated = estimate_messages(messages, family) + overhead_tokens
        return ContextCount(math.ceil(estimated * ratio), 0, estimated, -1)
    usage: Usage = messages[anchor].usage  # type: ignore[assignment]
    billed = messages[anchor].meta.get(OVERHEAD_META)
    grown = overhead_tokens - billed if isinstance(billed, int) else 0
    # The response's own later parts (parallel tool calls split over several messages) are
    # already in its output_tokens: only what came between and after them is estimated.
    api_id = messages[anchor].api_id
    estimated = estimate_messages([m for m in messages[anchor + 1 :] if m.api_id != api_id], family)
    anchored = usage.context_tokens + grown
    tokens = anchored + math.ceil(estimated * ratio) - freed_since_anchor
    return ContextCount(max(0, tokens), anchored, estimated, anchor, freed_since_anchor)
